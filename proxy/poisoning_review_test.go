package proxy

import (
	"bytes"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Attacks from the hostile review of the field-keying change (sliced
// objects, Range probes, the disk tier, prefix purge, variant eviction),
// kept as regressions: each failed before its fix.

// TestDiskTierIgnoresKeyedFields: for a URL without Vary the disk
// tier never asks for the variant key (disk/tier.go Lookup computes vk only
// when len(o.vary) > 0), so a request carrying a keyed field is answered
// with the plain variant from disk and its field never reaches the origin.
// In RAM the same request selects a variant of its own.
func TestDiskTierIgnoresKeyedFields(t *testing.T) {
	h, calls, tier, _ := diskProxy(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "public, max-age=60")
		_, _ = io.WriteString(w, "base="+r.Header.Get("X-Asset-Base"))
	}, nil)
	serveFlushed(t, h, tier, "GET", "/d")
	r := serveFlushed(t, h, tier, "GET", "/d", "X-Asset-Base", "//cdn2.example")
	t.Logf("keyed request: body %q, Cache-Status %q, origin calls %d", r.body, r.header.Get("Cache-Status"), calls.Load())
	if !strings.Contains(r.body, "//cdn2.example") || calls.Load() != 2 {
		t.Fatalf("a request with a keyed field was given the plain variant from disk (body %q)", r.body)
	}
}

// TestDiskKeyedRevalidationRewritesPlainVariant: a keyed request
// whose lookup fell to the disk tier validates the *plain* stale variant
// with its own field; the origin's 304, made for that field, is merged
// into the plain variant (updateFrom304 keeps stale.VaryKey == "") and
// served to every plain visitor.
func TestDiskKeyedRevalidationRewritesPlainVariant(t *testing.T) {
	clk := &clock{now: t0}
	h, _, tier, _ := diskProxy(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Date", clk.Now().Format(http.TimeFormat))
		w.Header().Set("Cache-Control", "public, max-age=60")
		w.Header().Set("ETag", `"v1"`)
		w.Header().Set("Link", "<"+r.Header.Get("X-Asset-Base")+"/app.css>; rel=preload")
		if r.Header.Get("If-None-Match") == `"v1"` {
			w.WriteHeader(http.StatusNotModified)
			return
		}
		_, _ = io.WriteString(w, "page")
	}, func(c *Config) { c.Now = clk.Now })
	serveFlushed(t, h, tier, "GET", "/p")
	clk.Set(t0.Add(2 * time.Minute)) // stale
	a := serveFlushed(t, h, tier, "GET", "/p", "X-Asset-Base", "//evil.example")
	t.Logf("attacker: Cache-Status %q", a.header.Get("Cache-Status"))
	v := serveFlushed(t, h, tier, "GET", "/p")
	t.Logf("victim: Cache-Status %q Link %q", v.header.Get("Cache-Status"), v.header.Get("Link"))
	if strings.Contains(v.header.Get("Link"), "evil") {
		t.Fatalf("a plain visitor got a Link the origin made from another client's X-Asset-Base: %q", v.header.Get("Link"))
	}
}

// TestKeyedFieldCollapsesIntoPlainProbe: Range requests for a URL
// not in the store share one slice probe per URL key (slice.go
// probeSliced: m.key+"\x00probe"), whatever their keyed fields; a plain
// Range request that arrives during a keyed request's probe is given the
// keyed request's answer.
func TestKeyedFieldCollapsesIntoPlainProbe(t *testing.T) {
	release := make(chan struct{})
	var started atomic.Int32
	lm := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	h, _ := handlerProxy(t, func(w http.ResponseWriter, r *http.Request) {
		started.Add(1)
		<-release
		fill := byte('A')
		if r.Header.Get("X-Asset-Base") != "" {
			fill = 'E'
		}
		w.Header().Set("Cache-Control", "public, max-age=3600")
		w.Header().Set("Content-Type", "application/octet-stream")
		http.ServeContent(w, r, "", lm, bytes.NewReader(bytes.Repeat([]byte{fill}, 1000)))
	}, func(c *Config) { c.SliceBytes = 1 << 20 })
	var wg sync.WaitGroup
	var attacker, victim []byte
	wg.Add(2)
	go func() {
		defer wg.Done()
		attacker = serve(h, "GET", "/app.js", "Range", "bytes=0-3", "X-Asset-Base", "//evil.example").Body.Bytes()
	}()
	for started.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	go func() {
		defer wg.Done()
		victim = serve(h, "GET", "/app.js", "Range", "bytes=0-3").Body.Bytes()
	}()
	deadline := time.Now().Add(300 * time.Millisecond)
	for started.Load() < 2 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	t.Logf("origin requests while held: %d", started.Load())
	close(release)
	wg.Wait()
	t.Logf("attacker %q victim %q", attacker, victim)
	if bytes.Contains(victim, []byte("E")) {
		t.Fatalf("a plain Range request was answered from a keyed request's probe: %q", victim)
	}
}

// TestPrefixPurgeIgnoresCanonicalHost: a URL purge canonicalises its
// host (URLKey -> CacheKey -> CanonicalHost) but a prefix purge only
// lower-cases it (purge.go normalizePrefix): the same host spelled with its
// port or a trailing dot purges nothing.
func TestPrefixPurgeIgnoresCanonicalHost(t *testing.T) {
	h, _ := handlerProxy(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "public, max-age=3600")
		_, _ = io.WriteString(w, "page")
	}, nil)
	for _, spelling := range []string{"http://example.com:80/dir/", "http://example.com./dir/", "http://EXAMPLE.com.:80/dir/"} {
		serve(h, "GET", "/dir/a")
		u, err := h.Purge(PurgeRequest{URL: spelling + "a"})
		serve(h, "GET", "/dir/a")
		p, perr := h.Purge(PurgeRequest{Prefix: spelling})
		t.Logf("%s: url purge removed %d (%v), prefix purge removed %d (%v)", spelling, u, err, p, perr)
		if u == 1 && p == 0 {
			t.Errorf("prefix %q purged nothing while the URL purge of the same spelling removed the entry", spelling)
		}
	}
}

// An origin that shapes a large object from a custom request field (the
// very thing fieldKey exists for) with a Last-Modified validator.
func shapedSliceOrigin(size int) http.HandlerFunc {
	lm := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	return func(w http.ResponseWriter, r *http.Request) {
		fill := byte('A')
		if r.Header.Get("X-Asset-Base") != "" {
			fill = 'E' // rendered from the client's field
		}
		w.Header().Set("Cache-Control", "public, max-age=3600")
		w.Header().Set("Content-Type", "application/octet-stream")
		http.ServeContent(w, r, "", lm, bytes.NewReader(bytes.Repeat([]byte{fill}, size)))
	}
}

// TestKeyedFieldPoisonsSharedSlices: slices fetched by Range for a
// keyed request's manifest are stored under the URL's slice keys with an
// empty variant key, and a plain request's manifest then reads them.
func TestKeyedFieldPoisonsSharedSlices(t *testing.T) {
	const slice = 1 << 20
	h, _ := handlerProxy(t, shapedSliceOrigin(3*slice), func(c *Config) { c.SliceBytes = slice; c.MaxObjectBytes = slice })
	// Attacker: a range inside slice 1, with a keyed field.
	a := serve(h, "GET", "/big.bin", "Range", "bytes=1048576-1048580", "X-Asset-Base", "//evil.example")
	t.Logf("attacker: %d %q cache-status=%q", a.Code, a.Body.String(), a.Header().Get("Cache-Status"))
	// Victim: a plain GET of the whole object, no custom field.
	v := serve(h, "GET", "/big.bin")
	t.Logf("victim: %d len=%d cache-status=%q", v.Code, v.Body.Len(), v.Header().Get("Cache-Status"))
	if n := bytes.Count(v.Body.Bytes(), []byte{'E'}); n > 0 {
		t.Fatalf("a plain request got %d bytes the origin rendered from another client's X-Asset-Base (first at %d)", n, bytes.IndexByte(v.Body.Bytes(), 'E'))
	}
}

// TestKeyedJunkEvictsPlainVariant: any URL, Vary or not, can now be
// given up to max_variants entries by unknown fields; the store drops the
// oldest (store.go putLocked), which is the shared plain variant.
func TestKeyedJunkEvictsPlainVariant(t *testing.T) {
	h, calls := handlerProxy(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "public, max-age=3600")
		_, _ = io.WriteString(w, "page")
	}, nil)
	serve(h, "GET", "/home")
	for i := range 8 { // handlerProxy's store keeps 8 variants per URL
		serve(h, "GET", "/home", "X-Junk", strconv.Itoa(i))
	}
	before := calls.Load()
	w := serve(h, "GET", "/home")
	t.Logf("plain visitor after 8 junk requests: %q, origin calls %d -> %d", w.Header().Get("Cache-Status"), before, calls.Load())
	if !strings.Contains(w.Header().Get("Cache-Status"), "hit") {
		t.Fatalf("8 requests with a junk field evicted the shared page of a URL without Vary")
	}
}
