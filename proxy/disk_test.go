package proxy

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edgecache/edge/disk"
)

// diskProxy is handlerProxy with a disk tier in a temporary directory.
// diskOnly sends every stored response to disk only, so that each hit
// after the first is read back from a file.
func diskProxy(t *testing.T, fn http.HandlerFunc, mod func(*Config)) (*Handler, *atomic.Int64, *disk.Tier, string) {
	t.Helper()
	h, calls := handlerProxy(t, fn, mod)
	dir := t.TempDir()
	tier, err := disk.Open(disk.Options{Dir: dir, MaxBytes: 64 << 20})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tier.Close(context.Background()) })
	h.store.AttachDisk(tier, TierOptions{PromoteHits: 1000, DiskOnlyBytes: 1})
	return h, calls, tier, dir
}

// serveFlushed serves one request and waits until its disk writes landed.
func serveFlushed(t *testing.T, h *Handler, tier *disk.Tier, method, target string, hdr ...string) *httpResult {
	t.Helper()
	w := serve(h, method, target, hdr...)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := tier.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	return &httpResult{code: w.Code, header: w.Header(), body: w.Body.String()}
}

type httpResult struct {
	code   int
	header http.Header
	body   string
}

// filesContain reports whether any file of the tier holds s.
func filesContain(t *testing.T, dir, s string) bool {
	t.Helper()
	found := false
	_ = filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err == nil && !fi.IsDir() {
			b, _ := os.ReadFile(p)
			found = found || bytes.Contains(b, []byte(s))
		}
		return nil
	})
	return found
}

// A stored response's per-user fields never reach the disk, and a disk hit
// never carries them.
func TestDiskNeverHoldsAnotherUsersCookie(t *testing.T) {
	h, calls, tier, dir := diskProxy(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "public, max-age=60")
		w.Header().Set("Set-Cookie", "session="+r.Header.Get("X-User"))
		_, _ = io.WriteString(w, "page")
	}, func(c *Config) { c.Policy.StoreSetCookie = true })
	if r := serveFlushed(t, h, tier, "GET", "/a", "X-User", "alice-secret"); r.header.Get("Set-Cookie") != "session=alice-secret" {
		t.Fatalf("alice lost her own cookie: %q", r.header.Get("Set-Cookie"))
	}
	if filesContain(t, dir, "alice-secret") {
		t.Fatal("alice's cookie was written to disk")
	}
	r := serveFlushed(t, h, tier, "GET", "/a", "X-User", "bob")
	if calls.Load() != 1 || tier.Stats().Hits != 1 {
		t.Fatalf("bob's request: %d origin calls, %d disk hits; want a disk hit", calls.Load(), tier.Stats().Hits)
	}
	if sc := r.header.Values("Set-Cookie"); len(sc) > 0 || r.body != "page" {
		t.Fatalf("bob got Set-Cookie %q, body %q", sc, r.body)
	}
}

// Responses that may not be shared never reach the disk.
func TestDiskNeverHoldsPrivateResponses(t *testing.T) {
	h, _, tier, dir := diskProxy(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/private":
			w.Header().Set("Cache-Control", "private, max-age=60")
		case "/no-store":
			w.Header().Set("Cache-Control", "no-store")
		case "/auth":
			w.Header().Set("Cache-Control", "max-age=60") // no public: not shareable with Authorization
		}
		_, _ = io.WriteString(w, "secret-for-"+r.Header.Get("X-User"))
	}, nil)
	serveFlushed(t, h, tier, "GET", "/private", "X-User", "alice")
	serveFlushed(t, h, tier, "GET", "/no-store", "X-User", "alice")
	serveFlushed(t, h, tier, "GET", "/auth", "X-User", "alice", "Authorization", "Bearer a")
	if st := tier.Stats(); st.Writes != 0 || filesContain(t, dir, "secret-for") {
		t.Fatalf("unshareable responses on disk: %+v", st)
	}
	for _, p := range []string{"/private", "/no-store", "/auth"} {
		if r := serveFlushed(t, h, tier, "GET", p, "X-User", "bob"); strings.Contains(r.body, "alice") {
			t.Fatalf("%s: bob got %q", p, r.body)
		}
	}
}

// An Authorization request never gets a disk copy that was not marked
// shareable for it, even though the copy exists.
func TestDiskHitWithAuthorizationNeedsPublic(t *testing.T) {
	h, calls, tier, _ := diskProxy(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=60")
		_, _ = io.WriteString(w, "for "+r.Header.Get("Authorization"))
	}, nil)
	serveFlushed(t, h, tier, "GET", "/a") // stored: no Authorization
	r := serveFlushed(t, h, tier, "GET", "/a", "Authorization", "Bearer bob")
	if calls.Load() != 2 || r.body != "for Bearer bob" {
		t.Fatalf("Authorization request answered from disk: %d calls, body %q", calls.Load(), r.body)
	}
}

// Vary: each user's variant stays with the user that selects it.
func TestDiskVariantsStayApart(t *testing.T) {
	h, calls, tier, _ := diskProxy(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=60")
		w.Header().Set("Vary", "X-User")
		_, _ = io.WriteString(w, "for "+r.Header.Get("X-User"))
	}, nil)
	serveFlushed(t, h, tier, "GET", "/v", "X-User", "alice")
	serveFlushed(t, h, tier, "GET", "/v", "X-User", "bob")
	for range 2 {
		for _, u := range []string{"alice", "bob", "carol"} {
			if r := serveFlushed(t, h, tier, "GET", "/v", "X-User", u); r.body != "for "+u {
				t.Fatalf("%s got %q", u, r.body)
			}
		}
	}
	if calls.Load() != 3 {
		t.Fatalf("origin calls = %d, want 3 (one per user)", calls.Load())
	}
}

// Purge removes the disk copy; soft purge makes it revalidate; a 304
// replaces the disk copy's header fields.
func TestDiskPurgeAndRevalidate(t *testing.T) {
	clk := &clock{now: t0}
	var version atomic.Int64
	version.Store(1)
	h, calls, tier, _ := diskProxy(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Date", clk.Now().Format(http.TimeFormat))
		w.Header().Set("Cache-Control", "max-age=60")
		w.Header().Set("Surrogate-Key", "tagged")
		etag := `"v` + string(rune('0'+version.Load())) + `"`
		w.Header().Set("ETag", etag)
		w.Header().Set("X-Served", clk.Now().Format(time.RFC3339))
		if r.Header.Get("If-None-Match") == etag {
			w.WriteHeader(http.StatusNotModified)
			return
		}
		_, _ = io.WriteString(w, "body "+etag)
	}, func(c *Config) { c.Now = clk.Now })
	serveFlushed(t, h, tier, "GET", "/p")
	if n, _ := h.Purge(PurgeRequest{Tag: "tagged"}); n != 1 {
		t.Fatalf("purge by tag removed %d", n)
	}
	if tier.Has(h.requestKey(httptestRequestWithBody("GET", "/p", ""))) {
		t.Fatal("purged object still on disk")
	}
	serveFlushed(t, h, tier, "GET", "/p")
	if calls.Load() != 2 {
		t.Fatalf("after purge: %d origin calls, want 2", calls.Load())
	}
	// Soft purge: the next request revalidates (304) and the disk copy
	// takes the 304's fields.
	if n, _ := h.Purge(PurgeRequest{Tag: "tagged", Soft: true}); n != 1 {
		t.Fatalf("soft purge marked %d", n)
	}
	clk.Set(t0.Add(10 * time.Second))
	r := serveFlushed(t, h, tier, "GET", "/p")
	if calls.Load() != 3 || r.body != `body "v1"` || r.header.Get("X-Served") != t0.Add(10*time.Second).Format(time.RFC3339) {
		t.Fatalf("soft-purged disk copy: %d calls, body %q, X-Served %q", calls.Load(), r.body, r.header.Get("X-Served"))
	}
	r = serveFlushed(t, h, tier, "GET", "/p")
	if calls.Load() != 3 || r.header.Get("X-Served") != t0.Add(10*time.Second).Format(time.RFC3339) {
		t.Fatalf("after the 304: %d calls, X-Served %q", calls.Load(), r.header.Get("X-Served"))
	}
}

// A page only the disk tier holds (every response here goes to disk only)
// leaves the store when it is purged, and the store's OnRemove hears it as
// it hears a RAM removal: the cluster's indicator advertises disk keys, and
// before the disk tier reported nothing, so a purge of a disk-only page left
// peers a positive for it until the next store.
func TestDiskOnlyRemovalsReachOnRemove(t *testing.T) {
	h, _, tier, _ := diskProxy(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=60")
		_, _ = io.WriteString(w, "page "+r.URL.Path)
	}, nil)
	var mu sync.Mutex
	heard := map[string]int{}
	h.store.OnRemove(func(key string) {
		mu.Lock()
		heard[key]++
		mu.Unlock()
	})
	serveFlushed(t, h, tier, "GET", "/a")
	serveFlushed(t, h, tier, "GET", "/b")
	keyA := h.requestKey(httptestRequestWithBody("GET", "/a", ""))
	keyB := h.requestKey(httptestRequestWithBody("GET", "/b", ""))
	if !tier.Has(keyA) || !tier.Has(keyB) {
		t.Fatal("the pages are not on disk")
	}
	if _, inRAM := h.store.lru.Peek(keyA); inRAM {
		t.Fatal("the page is in RAM: the test needs it on disk only")
	}
	if n := h.store.Remove(keyA); n != 1 {
		t.Fatalf("the purge removed %d", n)
	}
	mu.Lock()
	a, b := heard[keyA], heard[keyB]
	mu.Unlock()
	if a == 0 {
		t.Fatal("a disk-only page was purged and OnRemove never heard of it")
	}
	if b != 0 {
		t.Fatalf("OnRemove heard of a page still held (%d times)", b)
	}
}
