package proxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edgecache/edge/disk"
)

// attachDiskOnly gives p's store a disk tier to which every response goes
// (and only there), so that each hit after the first reads a file.
func attachDiskOnly(t *testing.T, h *Handler) *disk.Tier {
	t.Helper()
	tier, err := disk.Open(disk.Options{Dir: t.TempDir(), MaxBytes: 64 << 20})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tier.Close(context.Background()) })
	h.store.AttachDisk(tier, TierOptions{PromoteHits: 1000, DiskOnlyBytes: 1})
	return tier
}

func rvFlush(t *testing.T, tier *disk.Tier) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := tier.Flush(ctx); err != nil {
		t.Fatal(err)
	}
}

// A site's max_ttl (or ttl) bounds how long a response is served without
// asking the origin, from disk as from RAM: a disk hit was revived with the
// origin's lifetime alone and served for the origin's hour (a review's
// test; the rules' lifetime now reaches revive through LookupFunc).
func TestDiskHitKeepsTheRulesMaxTTL(t *testing.T) {
	for _, tc := range []struct {
		name  string
		rules string
	}{
		{"max_ttl", `[{name: ceiling, max_ttl: 1m}]`},
		{"ttl", `[{name: over, ttl: 1m}]`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newRuleProxy(t, ruleSite(t, tc.rules), func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Cache-Control", "public, max-age=3600")
				w.Header().Set("Content-Type", "text/plain")
				_, _ = w.Write([]byte("version-" + p0(r)))
			}, nil)
			tier := attachDiskOnly(t, p.h)
			p.get("/x")
			rvFlush(t, tier)
			if tier.Stats().Writes != 1 {
				t.Fatalf("not on disk: %+v", tier.Stats())
			}
			p.advance(2 * time.Minute)
			w := p.get("/x")
			if p.calls.Load() != 2 {
				t.Fatalf("%s 1m: after 2 minutes the disk copy was served without asking the origin (origin calls %d, X-Cache %q, Age %q, disk hits %d)",
					tc.name, p.calls.Load(), w.Header().Get("X-Cache"), w.Header().Get("Age"), tier.Stats().Hits)
			}
		})
	}
}

func p0(r *http.Request) string { return r.URL.Path }

// rvGateFS is the operating system's files with every Stage held until
// release is closed: the disk write of a response is in progress.
type rvGateFS struct {
	tmp     string
	entered chan struct{}
	release chan struct{}
}

type rvStaged struct{ name string }

func (r rvStaged) Commit(p string) error { return os.Rename(r.name, p) }
func (r rvStaged) Abort()                { _ = os.Remove(r.name) }

func (g *rvGateFS) Stage(dir string, data []byte) (disk.Staged, error) {
	select {
	case g.entered <- struct{}{}:
	default:
	}
	<-g.release
	f, err := os.CreateTemp(g.tmp, "w-")
	if err != nil {
		return nil, err
	}
	_, err = f.Write(data)
	_ = f.Close()
	if err != nil {
		return nil, err
	}
	return rvStaged{f.Name()}, nil
}
func (g *rvGateFS) Remove(name string) error             { return os.Remove(name) }
func (g *rvGateFS) ReadFile(name string) ([]byte, error) { return os.ReadFile(name) }
func (g *rvGateFS) SetStale(name string) error {
	f, err := os.OpenFile(name, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	_, err = f.WriteAt([]byte{1}, 4)
	_ = f.Close()
	return err
}

// A tag or prefix purge that comes while a disk-only response (at least
// DiskOnlyBytes: never in RAM) is still being written to disk finds it:
// the queued write is in neither RAM nor the disk index, and the purge
// reported 0, the write landed and the purged body was served (a review's
// test; disk.Tier's Keys and KeysWithTag now read the queue too).
func TestPurgeFindsAResponseStillBeingWrittenToDisk(t *testing.T) {
	for _, purge := range []PurgeRequest{{Tag: "product-7"}, {Tag: "product-7", Soft: true}, {Prefix: "/products/"}, {Prefix: "http://example.com/products/"}} {
		t.Run(purge.Query(), func(t *testing.T) {
			var version atomic.Int64
			h, calls := handlerProxy(t, func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Cache-Control", "public, max-age=3600")
				w.Header().Set("Surrogate-Key", "product-7")
				_, _ = fmt.Fprintf(w, "price v%d", version.Add(1))
			}, nil)
			dir := t.TempDir()
			g := &rvGateFS{tmp: t.TempDir(), entered: make(chan struct{}, 1), release: make(chan struct{})}
			tier, err := disk.Open(disk.Options{Dir: dir, MaxBytes: 64 << 20, FS: g})
			if err != nil {
				t.Fatal(err)
			}
			released := false
			t.Cleanup(func() {
				if !released {
					close(g.release)
				}
				_ = tier.Close(context.Background())
			})
			h.store.AttachDisk(tier, TierOptions{PromoteHits: 1000, DiskOnlyBytes: 1}) // every response disk-only
			if w := serve(h, "GET", "/products/7"); w.Body.String() != "price v1" {
				t.Fatalf("first: %q", w.Body.String())
			}
			<-g.entered // the writer is writing it
			n, err := h.Purge(purge)
			if err != nil {
				t.Fatal(err)
			}
			close(g.release)
			released = true
			rvFlush(t, tier)
			w := serve(h, "GET", "/products/7")
			if w.Body.String() != "price v2" {
				t.Fatalf("purge %s touched %d; after it the purged body %q was served (origin calls %d, disk %+v)",
					purge.Query(), n, w.Body.String(), calls.Load(), tier.Stats())
			}
		})
	}
}

// The other way: a rule's default_ttl for an origin that gives no
// freshness holds for a disk hit too (revived without it, every disk hit
// went to the origin).
func TestDiskHitKeepsTheRulesDefaultTTL(t *testing.T) {
	p := newRuleProxy(t, ruleSite(t, `[{name: pages, default_ttl: 1h}]`), plainPage, nil)
	tier := attachDiskOnly(t, p.h)
	p.get("/page")
	rvFlush(t, tier)
	p.advance(time.Minute)
	w := p.get("/page")
	if p.calls.Load() != 1 {
		t.Fatalf("default_ttl 1h: a disk hit one minute later went to the origin (origin calls %d, disk hits %d, Cache-Status %q)",
			p.calls.Load(), tier.Stats().Hits, w.Header().Get("Cache-Status"))
	}
}

// Control: without the disk tier the same rules hold.
func TestRulesMaxTTLFromRAM(t *testing.T) {
	p := newRuleProxy(t, ruleSite(t, `[{name: ceiling, max_ttl: 1m}]`), func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "public, max-age=3600")
		_, _ = w.Write([]byte("x"))
	}, nil)
	p.get("/x")
	p.advance(2 * time.Minute)
	p.get("/x")
	if p.calls.Load() != 2 {
		t.Fatalf("RAM: max_ttl not applied either (calls %d)", p.calls.Load())
	}
}

// RAM keeps at most MaxVariants per URL, and a variant made for a
// request's own keyed fields (an unknown header: fieldKey) never displaces
// the variants everyone is served ("so that requests with junk fields
// cannot push out the variants everyone else is served"). The disk tier
// has no per-URL cap, and Put wrote every such variant through: one client
// sending one URL with distinct junk header values filled the disk and
// evicted every other URL from it (a review's test). Such variants now
// stay off the disk.
func TestJunkFieldVariantsStayOffTheDisk(t *testing.T) {
	body := strings.Repeat("x", 8<<10)
	h, _ := handlerProxy(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "public, max-age=3600")
		_, _ = io.WriteString(w, body)
	}, nil)
	tier, err := disk.Open(disk.Options{Dir: t.TempDir(), MaxBytes: 256 << 10})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tier.Close(context.Background()) })
	h.store.AttachDisk(tier, TierOptions{})
	for i := range 10 {
		serve(h, "GET", fmt.Sprintf("/popular/%d", i))
	}
	rvFlush(t, tier)
	for i := range 200 {
		serve(h, "GET", "/one-url", "X-Junk", fmt.Sprint(i))
		rvFlush(t, tier)
	}
	ram := 0
	if o, ok := h.store.lru.Peek(h.requestKey(httptestRequestWithBody("GET", "/one-url", ""))); ok {
		ram = len(o.variants)
	}
	left := 0
	for i := range 10 {
		if tier.Has(h.requestKey(httptestRequestWithBody("GET", fmt.Sprintf("/popular/%d", i), ""))) {
			left++
		}
	}
	st := tier.Stats()
	if left < 10 {
		t.Fatalf("one URL with junk-field variants: RAM holds %d of its variants, the disk %d objects; %d of 10 popular URLs left on disk (evictions %d)",
			ram, st.Objects, left, st.Evictions)
	}
}

// rvReadOnlyFS is the operating system's files on a disk that has gone
// read-only once ro is set: reads work, removals and flag writes fail.
type rvReadOnlyFS struct {
	rvGateFS
	ro atomic.Bool
}

func (f *rvReadOnlyFS) Remove(name string) error {
	if f.ro.Load() {
		return &os.PathError{Op: "unlink", Path: name, Err: os.ErrPermission}
	}
	return os.Remove(name)
}

func (f *rvReadOnlyFS) SetStale(name string) error {
	if f.ro.Load() {
		return &os.PathError{Op: "open", Path: name, Err: os.ErrPermission}
	}
	return f.rvGateFS.SetStale(name)
}

// TestPurgeOnAFailingDiskIsReportedIncomplete: a purge whose file the
// disk could not remove takes effect in this process but may come back
// at the next start's scan: Purge says so (ErrPurgeIncomplete), where it
// reported success (a review's finding), and the purged body is not
// served.
func TestPurgeOnAFailingDiskIsReportedIncomplete(t *testing.T) {
	for _, purge := range []PurgeRequest{{URL: "http://example.com/products/7"}, {Tag: "product-7"}, {Tag: "product-7", Soft: true}} {
		t.Run(purge.Query(), func(t *testing.T) {
			var version atomic.Int64
			h, _ := handlerProxy(t, func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Cache-Control", "public, max-age=3600")
				w.Header().Set("Surrogate-Key", "product-7")
				_, _ = fmt.Fprintf(w, "price v%d", version.Add(1))
			}, nil)
			f := &rvReadOnlyFS{rvGateFS: rvGateFS{tmp: t.TempDir(), entered: make(chan struct{}, 1), release: make(chan struct{})}}
			close(f.release)
			tier, err := disk.Open(disk.Options{Dir: t.TempDir(), MaxBytes: 64 << 20, FS: f})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = tier.Close(context.Background()) })
			h.store.AttachDisk(tier, TierOptions{PromoteHits: 1000, DiskOnlyBytes: 1})
			get := func() string { return serve(h, "GET", "/products/7").Body.String() }
			if b := get(); b != "price v1" {
				t.Fatalf("first: %q", b)
			}
			rvFlush(t, tier)
			f.ro.Store(true)
			_, err = h.Purge(purge)
			if !errors.Is(err, ErrPurgeIncomplete) {
				t.Fatalf("purge on a read-only disk: %v, want ErrPurgeIncomplete", err)
			}
			if b := get(); b == "price v1" {
				t.Errorf("the purged body was served after the purge")
			}
		})
	}
}
