package proxy

import (
	"bytes"
	"context"
	"net/http"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/edgecache/edge/disk"
)

func flushTier(t *testing.T, tier *disk.Tier) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := tier.Flush(ctx); err != nil {
		t.Fatal(err)
	}
}

func tierAt(t *testing.T, dir string, fsys disk.FS) *disk.Tier {
	t.Helper()
	tier, err := disk.Open(disk.Options{Dir: dir, MaxBytes: 256 << 20, FS: fsys})
	if err != nil {
		t.Fatal(err)
	}
	return tier
}

// P1: a manifest read from disk is promoted to RAM with Entry.sibling, which
// does not copy sliceTotal: the RAM copy is an ordinary entry with no body,
// and the next request gets "200 OK" with an empty body.
func TestPromotedManifestServesEmptyBody(t *testing.T) {
	o := newSliceOrigin(3 << 20)
	dir := t.TempDir()
	mod := func(c *Config) { c.SliceBytes = 1 << 20; c.MaxObjectBytes = 1 << 20 }

	h1, _ := handlerProxy(t, o.serve, mod)
	tier := tierAt(t, dir, nil)
	h1.store.AttachDisk(tier, TierOptions{PromoteHits: 1})
	if w := serve(h1, "GET", "/movie"); !bytes.Equal(w.Body.Bytes(), o.body) {
		t.Fatal("first read")
	}
	flushTier(t, tier)
	if err := tier.Close(context.Background()); err != nil {
		t.Fatal(err)
	}

	// Restart: RAM empty, the disk keeps the manifest and slices.
	h2, _ := handlerProxy(t, o.serve, mod)
	tier2 := tierAt(t, dir, nil)
	t.Cleanup(func() { _ = tier2.Close(context.Background()) })
	h2.store.AttachDisk(tier2, TierOptions{PromoteHits: 1})
	if w := serve(h2, "GET", "/movie"); !bytes.Equal(w.Body.Bytes(), o.body) {
		t.Fatalf("disk hit: %d, %d bytes", w.Code, w.Body.Len())
	}
	w := serve(h2, "GET", "/movie") // RAM hit on the promoted copy
	if w.Code != http.StatusOK || !bytes.Equal(w.Body.Bytes(), o.body) {
		t.Fatalf("after promotion: status %d, %d bytes of %d, Cache-Status %q, Edge-Slice-Size %q",
			w.Code, w.Body.Len(), len(o.body), w.Header().Get("Cache-Status"), w.Header().Get("Edge-Slice-Size"))
	}
}

// P2: slice_bytes changed across a restart (the disk keeps slices): the
// manifest does not record the slice size, and an old slice whose length
// happens to equal a new slice's length is spliced in at the wrong offset.
func TestSliceSizeChangeServesWrongBytes(t *testing.T) {
	o := newSliceOrigin(2500)
	dir := t.TempDir()
	h1, _ := handlerProxy(t, o.serve, func(c *Config) { c.SliceBytes = 1000; c.MaxObjectBytes = 1000 })
	tier := tierAt(t, dir, nil)
	h1.store.AttachDisk(tier, TierOptions{})
	if w := serve(h1, "GET", "/f"); !bytes.Equal(w.Body.Bytes(), o.body) {
		t.Fatal("first read")
	}
	flushTier(t, tier)
	_ = tier.Close(context.Background())

	h2, _ := handlerProxy(t, o.serve, func(c *Config) { c.SliceBytes = 1500; c.MaxObjectBytes = 1000 })
	tier2 := tierAt(t, dir, nil)
	t.Cleanup(func() { _ = tier2.Close(context.Background()) })
	h2.store.AttachDisk(tier2, TierOptions{})
	w := serve(h2, "GET", "/f")
	if !bytes.Equal(w.Body.Bytes(), o.body) {
		first := -1
		for i := range o.body {
			if i >= w.Body.Len() || w.Body.Bytes()[i] != o.body[i] {
				first = i
				break
			}
		}
		t.Fatalf("status %d, %d bytes: wrong bytes from offset %d on", w.Code, w.Body.Len(), first)
	}
}

// gateReadFS is a minimal disk.FS whose ReadFile can be held.
type gateReadFS struct {
	mu      sync.Mutex
	hold    bool
	atRead  chan struct{}
	release chan struct{}
}

type renameStaged struct{ tmp string }

func (s renameStaged) Commit(p string) error { return os.Rename(s.tmp, p) }
func (s renameStaged) Abort()                { os.Remove(s.tmp) }

func (g *gateReadFS) Stage(dir string, b []byte) (disk.Staged, error) {
	f, err := os.CreateTemp(dir, "stage-")
	if err != nil {
		return nil, err
	}
	_, err = f.Write(b)
	f.Close()
	return renameStaged{f.Name()}, err
}
func (g *gateReadFS) Remove(n string) error { return os.Remove(n) }
func (g *gateReadFS) ReadFile(n string) ([]byte, error) {
	g.mu.Lock()
	hold := g.hold
	g.hold = false
	g.mu.Unlock()
	b, err := os.ReadFile(n)
	if hold {
		close(g.atRead)
		<-g.release
	}
	return b, err
}
func (g *gateReadFS) SetStale(n string) error {
	f, err := os.OpenFile(n, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = f.WriteAt([]byte{1}, 4)
	return err
}

// P3: a disk hit is promoted to RAM with no check for a purge that came
// while the file was being read: the purged response is put back into RAM
// and served to everyone afterwards.
func TestPromotionUndoesPurge(t *testing.T) {
	var mu sync.Mutex
	version := "v1-old-content"
	h, _ := handlerProxy(t, func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		v := version
		mu.Unlock()
		w.Header().Set("Cache-Control", "public, max-age=3600")
		_, _ = w.Write([]byte(v))
	}, nil)
	g := &gateReadFS{atRead: make(chan struct{}), release: make(chan struct{})}
	tier := tierAt(t, t.TempDir(), g)
	t.Cleanup(func() { _ = tier.Close(context.Background()) })
	h.store.AttachDisk(tier, TierOptions{PromoteHits: 1})
	serve(h, "GET", "/p")
	flushTier(t, tier)
	key := h.requestKey(httptestRequestWithBody("GET", "/p", ""))
	h.store.mu.Lock()
	h.store.lru.Remove(key) // evicted from RAM; on disk
	h.store.mu.Unlock()

	g.mu.Lock()
	g.hold = true
	g.mu.Unlock()
	done := make(chan struct{})
	go func() { serve(h, "GET", "/p"); close(done) }() // a disk hit, reading
	<-g.atRead
	mu.Lock()
	version = "v2-new-content"
	mu.Unlock()
	if _, err := h.Purge(PurgeRequest{URL: "http://example.com/p"}); err != nil {
		t.Fatal(err)
	}
	close(g.release)
	<-done
	if w := serve(h, "GET", "/p"); w.Body.String() != "v2-new-content" {
		t.Fatalf("after the purge: %q (Cache-Status %q)", w.Body.String(), w.Header().Get("Cache-Status"))
	}
}

// Regression (review P4): the per-slice fetch sharing was keyed by slice
// key alone, so a reader of the new version that joined a fetch made for
// the old version's manifest was handed the old bytes: two versions
// spliced (same sizes), or a response that never ended (sizes differ).
func TestSliceSingleflightSplicesVersions(t *testing.T) {
	sliceJoinScenario(t, 3000, 3000)
}

func TestSliceSingleflightSizeChangeHangs(t *testing.T) {
	sliceJoinScenario(t, 2500, 3000)
}

// sliceJoinScenario: reader A fetches slice 2 of version 1 (size1 bytes);
// the object changes to version 2 (size2 bytes) and is purged; reader B
// asks for the same range while A's fetch is held, and must get version
// 2's bytes, whole, in time.
func sliceJoinScenario(t *testing.T, size1, size2 int) {
	v1, v2 := make([]byte, size1), make([]byte, size2)
	for i := range v1 {
		v1[i] = byte(i * 7)
	}
	for i := range v2 {
		v2[i] = ^byte(i * 7)
	}
	gate := "bytes=2000-" + strconv.Itoa(min(2999, size1-1))
	var mu sync.Mutex
	cur, etag := v1, `"v1"`
	blocked, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	h, _ := handlerProxy(t, func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		body, tag := cur, etag
		mu.Unlock()
		if r.Header.Get("Range") == gate {
			once.Do(func() { close(blocked); <-release })
		}
		w.Header().Set("Cache-Control", "public, max-age=3600")
		w.Header().Set("Content-Type", "video/mp4")
		w.Header().Set("ETag", tag)
		http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(body))
	}, func(c *Config) { c.SliceBytes = 1000; c.MaxObjectBytes = 1000 })

	serve(h, "GET", "/o", "Range", "bytes=0-0") // manifest of v1, slice 0
	aDone := make(chan struct{})
	go func() { serve(h, "GET", "/o", "Range", "bytes=2000-"); close(aDone) }()
	<-blocked // A's fetch of slice 2 (for v1) is in flight

	mu.Lock()
	cur, etag = v2, `"v2"`
	mu.Unlock()
	if _, err := h.Purge(PurgeRequest{URL: "http://example.com/o"}); err != nil {
		t.Fatal(err)
	}
	var b *recorderResult
	bDone := make(chan struct{})
	go func() {
		rec := newRecorder()
		r := httptestRequestWithBody("GET", "/o", "")
		r.Header.Set("Range", "bytes=2000-")
		func() {
			defer func() { _ = recover() }()
			h.ServeHTTP(rec, r)
		}()
		b = &recorderResult{Code: rec.Code, Body: rec.Body}
		if et := rec.Header().Get("ETag"); et != `"v2"` {
			t.Errorf("B's ETag %q", et)
		}
		close(bDone)
	}()
	time.Sleep(300 * time.Millisecond) // B has joined A's fetch of slice 2
	close(release)
	<-aDone
	select {
	case <-bDone:
	case <-time.After(30 * time.Second):
		t.Fatal("B's response never ended")
	}
	h.Wait()
	if !bytes.Equal(b.Body.Bytes(), v2[2000:]) {
		t.Fatalf("B (ETag v2) got %d bytes; v1's bytes: %v", b.Body.Len(), bytes.Equal(b.Body.Bytes(), v1[2000:min(3000, size1)]))
	}
}

// P5: Put of a disk-only response drops from RAM only the variant with the
// same Vary key; when the new response changes the Vary names, the older
// RAM variant stays and is served after the newer response was stored.
func TestDiskOnlyPutLeavesOlderRAMVariant(t *testing.T) {
	var mu sync.Mutex
	big := false
	h, _ := handlerProxy(t, func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		b := big
		mu.Unlock()
		w.Header().Set("Cache-Control", "public, max-age=3600")
		if !b {
			_, _ = w.Write([]byte("old small page"))
			return
		}
		w.Header().Set("Vary", "Cookie")
		_, _ = w.Write(bytes.Repeat([]byte("N"), 5000))
	}, nil)
	tier := tierAt(t, t.TempDir(), nil)
	t.Cleanup(func() { _ = tier.Close(context.Background()) })
	h.store.AttachDisk(tier, TierOptions{DiskOnlyBytes: 2000})
	serve(h, "GET", "/v", "Cookie", "u=a") // small: RAM and disk
	mu.Lock()
	big = true
	mu.Unlock()
	if w := serve(h, "GET", "/v", "Cookie", "u=a", "Cache-Control", "no-cache"); w.Body.Len() != 5000 {
		t.Fatalf("reload: %d bytes", w.Body.Len())
	}
	flushTier(t, tier)
	if w := serve(h, "GET", "/v", "Cookie", "u=a"); w.Body.Len() != 5000 {
		t.Fatalf("after the newer response was stored: %q (Cache-Status %q)", w.Body.String(), w.Header().Get("Cache-Status"))
	}
}
