package proxy

import (
	"bytes"
	"context"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/edgecache/edge/disk"
)

// s55GateFS is a disk.FS on named files whose Stage of a record holding
// mark blocks until release is closed, reporting once (at) that it was
// reached.
type s55GateFS struct {
	mark    []byte
	at      chan struct{}
	release chan struct{}
	once    sync.Once
}

type s55Staged string

func (s s55Staged) Commit(p string) error { return os.Rename(string(s), p) }
func (s s55Staged) Abort()                { _ = os.Remove(string(s)) }

func (g *s55GateFS) Stage(dir string, b []byte) (disk.Staged, error) {
	if bytes.Contains(b, g.mark) {
		g.once.Do(func() { close(g.at) })
		<-g.release
	}
	f, err := os.CreateTemp(dir, "s55-")
	if err != nil {
		return nil, err
	}
	_, err = f.Write(b)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = os.Remove(f.Name())
		return nil, err
	}
	return s55Staged(f.Name()), nil
}

func (g *s55GateFS) Remove(name string) error             { return os.Remove(name) }
func (g *s55GateFS) ReadFile(name string) ([]byte, error) { return os.ReadFile(name) }
func (g *s55GateFS) SetStale(name string) error {
	f, err := os.OpenFile(name, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	_, err = f.WriteAt([]byte{1}, 4)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// putUnlessPurged stores a fill that a purge overtook, then takes it back
// with RemoveVariantUnlessReplaced, which leaves it when RAM holds another
// entry of the variant: "a Put after e's, which replaced e on the disk
// tier too". A newer Put's disk write can be dropped (the write queue is
// full, the response too large for it), and then it replaces nothing on
// disk: the overtaken fill's write, still queued, lands. Here, as a
// purge-overtaken fill and a fill that began after the purge interleave:
// Put(pre-purge copy) with its disk write under way; Put(post-purge
// copy), whose disk write is dropped; RemoveVariantUnlessReplaced(pre-
// purge copy), which finds the post-purge copy in RAM and leaves it. The
// pre-purge copy reaches the disk, and the next start serves it: the page
// as it was before the purge.
func TestS55DiskPurgeOvertakenFillLandsWhenTheNewerWriteIsDropped(t *testing.T) {
	dir := t.TempDir()
	gate := &s55GateFS{mark: []byte("BEFORE-PURGE"), at: make(chan struct{}), release: make(chan struct{})}
	release := sync.OnceFunc(func() { close(gate.release) })
	t.Cleanup(release)
	h, _ := handlerProxy(t, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Cache-Control", "public, max-age=3600")
		_, _ = w.Write([]byte("origin: after the purge"))
	}, nil)
	tier, err := disk.Open(disk.Options{Dir: dir, MaxBytes: 64 << 20, QueueBytes: 16 << 10, FS: gate, KeyScheme: CacheKeyVersion})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tier.Close(context.Background()) })
	h.store.AttachDisk(tier, TierOptions{PromoteHits: 1, DiskOnlyBytes: 1 << 20})

	const key = "http://example.com/article"
	entry := func(body string) *Entry {
		now := time.Now()
		return h.revive(&disk.Record{Key: key, Status: 200, Body: []byte(body), RequestTime: now, ResponseTime: now,
			Header: http.Header{"Cache-Control": {"public, max-age=3600"}, "Content-Type": {"text/plain"}}}, nil)
	}
	old := entry("BEFORE-PURGE")
	h.store.Put(old) // the overtaken fill's Put
	select {
	case <-gate.at:
	case <-time.After(30 * time.Second):
		t.Fatal("the first write never reached the disk")
	}
	h.store.Put(entry("after the purge " + strings.Repeat("x", 16<<10))) // the newer fill's Put: its disk write is dropped
	if n := h.store.RemoveVariantUnlessReplaced(old); n != 0 {
		t.Fatalf("RemoveVariantUnlessReplaced removed %d: the test needs RAM to hold the newer copy", n)
	}
	release()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := tier.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if err := tier.Close(ctx); err != nil {
		t.Fatal(err)
	}

	h2, calls2, _ := s29Node(t, dir, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Cache-Control", "public, max-age=3600")
		_, _ = w.Write([]byte("origin: after the purge"))
	}, nil)
	if w := s29Serve(h2, "/article", false); strings.Contains(w.Body.String(), "BEFORE-PURGE") {
		t.Errorf("after a restart the page as it was before the purge is served from disk: %q (origin asked %d times)", w.Body.String(), calls2.Load())
	}
}
