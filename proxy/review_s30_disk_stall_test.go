package proxy

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edgecache/edge/disk"
)

// s30FS is the operating system's files, staged as named temporary files;
// once armed, Commit blocks until release is closed (a disk whose links
// stall), and Stage blocks while stageHeld is set.
type s30FS struct {
	tmp       string
	armed     atomic.Bool
	stageHeld atomic.Bool
	atCommit  chan struct{}
	atStage   chan struct{}
	release   chan struct{}
	once      sync.Once
	onceS     sync.Once
}

type s30Staged struct {
	name string
	fs   *s30FS
}

func (s s30Staged) Commit(p string) error {
	if s.fs.armed.Load() {
		s.fs.once.Do(func() { close(s.fs.atCommit) })
		<-s.fs.release
	}
	return os.Rename(s.name, p)
}
func (s s30Staged) Abort() { _ = os.Remove(s.name) }

func (g *s30FS) Stage(dir string, data []byte) (disk.Staged, error) {
	if g.stageHeld.Load() {
		g.onceS.Do(func() { close(g.atStage) })
		<-g.release
	}
	f, err := os.CreateTemp(g.tmp, "w-")
	if err != nil {
		return nil, err
	}
	_, err = f.Write(data)
	_ = f.Close()
	if err != nil {
		_ = os.Remove(f.Name())
		return nil, err
	}
	return s30Staged{f.Name(), g}, nil
}
func (g *s30FS) Remove(name string) error             { return os.Remove(name) }
func (g *s30FS) ReadFile(name string) ([]byte, error) { return os.ReadFile(name) }
func (g *s30FS) SetStale(name string) error {
	f, err := os.OpenFile(name, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	_, err = f.WriteAt([]byte{1}, 4)
	_ = f.Close()
	return err
}

func newS30FS(t *testing.T) *s30FS {
	return &s30FS{tmp: t.TempDir(), atCommit: make(chan struct{}), atStage: make(chan struct{}), release: make(chan struct{})}
}

func (g *s30FS) open(t *testing.T) *disk.Tier {
	t.Helper()
	tier, err := disk.Open(disk.Options{Dir: t.TempDir(), MaxBytes: 64 << 20, FS: g})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		select {
		case <-g.release:
		default:
			close(g.release)
		}
		_ = tier.Close(context.Background())
	})
	return tier
}

// A review found (now mended): since 3f097a4 a soft purge waits for every disk commit under
// way, of any key (disk.Tier.MarkStale takes commitMu exclusively), and
// Store.MarkStale marks the RAM copies only after the disk's MarkStale
// returns. Steps: /b is cached (RAM and disk); a fill of an unrelated page
// /a is being linked into the disk tier and the disk stalls; an admin soft
// purge of /b (Purge{URL: /b, Soft: true}) is made; a client asks for /b.
// Expected: the soft purge takes effect in RAM at once (it did before
// 3f097a4: MarkStale never waited on the disk's commits), so /b is
// revalidated with the origin. Actual: the purge hangs for as long as the
// unrelated write stalls and, meanwhile, /b is served from RAM as a fresh
// hit, the origin not asked — with a disk hung on a link, indefinitely.
func TestS30DiskSoftPurgeStalledBehindAnUnrelatedWriteServesFresh(t *testing.T) {
	var version atomic.Int64
	h, calls := handlerProxy(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "public, max-age=3600")
		_, _ = fmt.Fprintf(w, "%s v%d", r.URL.Path, version.Add(1))
	}, nil)
	g := newS30FS(t)
	tier := g.open(t)
	h.store.AttachDisk(tier, TierOptions{})
	if b := serve(h, "GET", "/b").Body.String(); !strings.HasPrefix(b, "/b ") {
		t.Fatalf("first /b: %q", b)
	}
	rvFlush(t, tier)
	g.armed.Store(true)
	serve(h, "GET", "/a") // answered; its disk write stalls at the link
	select {
	case <-g.atCommit:
	case <-time.After(5 * time.Second):
		t.Fatal("the write of /a never reached its commit")
	}
	purged := make(chan error, 1)
	go func() {
		_, err := h.Purge(PurgeRequest{URL: "http://example.com/b", Soft: true})
		purged <- err
	}()
	time.Sleep(300 * time.Millisecond)
	before := calls.Load()
	w := serve(h, "GET", "/b")
	fresh := calls.Load() == before
	stalled := false
	var err error
	select {
	case err = <-purged:
	default:
		stalled = true
	}
	close(g.release)
	if stalled {
		err = <-purged
	}
	if err != nil {
		t.Fatal(err)
	}
	if fresh {
		t.Fatalf("300 ms after an admin soft purge of /b (still returned: %v), /b was served from cache without asking the origin: %q (Cache-Status %q)",
			!stalled, w.Body.String(), w.Header().Get("Cache-Status"))
	}
}

// Held: revive's strip of fields a record's lists name works on a copy of
// the header: the record read from the disk tier's pending queue (whose
// Header is the map the disk writer encodes, and for a fill the RAM
// entry's own) keeps its fields, and two revives of one record (served
// entry and promoted entry) do not share a map. Run with -race: the
// writer encodes the map while the revive reads it.
func TestS30DiskReviveStripDoesNotTouchSharedHeaders(t *testing.T) {
	h, _ := handlerProxy(t, func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "unused")
	}, nil)
	g := newS30FS(t)
	tier := g.open(t)
	h.store.AttachDisk(tier, TierOptions{PromoteHits: 1})
	shared := http.Header{
		"Cache-Control": {`max-age=600, no-cache="X-Account"`},
		"X-Account":     {"alice"},
		"Content-Type":  {"text/plain"},
	}
	g.stageHeld.Store(true)
	tier.Write(&disk.Record{
		Key: "http://example.com/p", Status: 200, Header: shared, Body: []byte("page"),
		RequestTime: time.Now(), ResponseTime: time.Now(),
	})
	<-g.atStage // the writer holds the record (and its map)
	rec, _ := tier.Lookup("http://example.com/p", func([]string) string { return "" })
	if rec == nil {
		t.Fatal("pending record not found")
	}
	var wg sync.WaitGroup
	entries := make([]*Entry, 2)
	for i := range entries {
		wg.Add(1)
		go func() { defer wg.Done(); r := *rec; entries[i] = h.revive(&r, nil) }()
	}
	wg.Wait()
	close(g.release)
	rvFlush(t, tier)
	for i, e := range entries {
		if e == nil || e.Header.Get("X-Account") != "" {
			t.Fatalf("revived entry %d kept the named field: %v", i, e)
		}
	}
	entries[0].Header.Set("X-Probe", "1")
	if entries[1].Header.Get("X-Probe") != "" {
		t.Fatal("two revived entries share one header map")
	}
	if shared.Get("X-Account") != "alice" || len(shared) != 3 {
		t.Fatalf("the pending record's header was changed by revive: %v", shared)
	}
	if rec.Header.Get("X-Account") != "alice" {
		t.Fatalf("the record Lookup returned was changed: %v", rec.Header)
	}
	// As lookupDisk does: revive the one record twice (served, promoted).
	e1, e2 := h.revive(rec, nil), h.revive(rec, nil)
	e1.Header.Set("X-Probe", "1")
	if e2.Header.Get("X-Probe") != "" || e2.Header.Get("X-Account") != "" || shared.Get("X-Account") != "alice" {
		t.Fatalf("sequential revives: %v / %v / %v", e1.Header, e2.Header, shared)
	}
}
