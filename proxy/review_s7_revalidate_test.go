package proxy

import (
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// TestS7A304WithAnotherStrongETagDoesNotFreshenTheOldBody: RFC 9111
// §4.3.4: "If the new response contains a strong validator ..., then that
// strong validator identifies the selected representations for update ...
// If none of the stored responses contain the same strong validator, then
// the cache MUST NOT use the new response to update any stored responses."
// An origin that answers the cache's conditional (If-None-Match "v1" plus
// If-Modified-Since) from Last-Modified only (content changed within the
// same second) answers 304 with ETag "v2". The edge deletes the 304's ETag
// from the update and freshens the v1 body for everyone for max-age.
//
// Failed before 2026-12-06; fixed: a revalidation sends If-None-Match alone when there is an ETag.
func TestS7A304WithAnotherStrongETagDoesNotFreshenTheOldBody(t *testing.T) {
	clk := &clock{now: t0}
	var version atomic.Int32
	version.Store(1)
	lm := t0.Add(-time.Hour).Format(http.TimeFormat)
	h, _ := handlerProxy(t, func(w http.ResponseWriter, r *http.Request) {
		v := version.Load()
		w.Header().Set("Date", clk.Now().Format(http.TimeFormat))
		w.Header().Set("Cache-Control", "max-age=10")
		w.Header().Set("Last-Modified", lm) // same second for v1 and v2
		w.Header().Set("ETag", map[int32]string{1: `"v1"`, 2: `"v2"`}[v])
		if r.Header.Get("If-Modified-Since") == lm { // an origin that looks at the date only
			w.WriteHeader(http.StatusNotModified)
			return
		}
		_, _ = io.WriteString(w, map[int32]string{1: "body-v1", 2: "body-v2"}[v])
	}, func(c *Config) { c.Now = clk.Now })
	if w := serve(h, "GET", "/doc"); w.Body.String() != "body-v1" {
		t.Fatalf("first: %q", w.Body.String())
	}
	version.Store(2)
	clk.Set(t0.Add(20 * time.Second)) // stale: revalidated
	w := serve(h, "GET", "/doc")
	t.Logf("revalidating request: %s %q etag %s", w.Header().Get("Cache-Status"), w.Body.String(), w.Header().Get("ETag"))
	clk.Set(t0.Add(21 * time.Second))
	w = serve(h, "GET", "/doc")
	t.Logf("next request: %s %q etag %s", w.Header().Get("Cache-Status"), w.Body.String(), w.Header().Get("ETag"))
	if strings.Contains(w.Header().Get("Cache-Status"), "hit") && w.Body.String() == "body-v1" {
		t.Errorf("a 304 carrying strong ETag \"v2\" freshened the stored \"v1\" response (RFC 9111 §4.3.4 MUST NOT update): "+
			"next request served the old body %q as a fresh hit (Cache-Status %q, ETag %s)",
			w.Body.String(), w.Header().Get("Cache-Status"), w.Header().Get("ETag"))
	}
}

// TestS7SoftPurgeDoesNotLoosenMustRevalidate: a stored response with
// must-revalidate (or s-maxage, proxy-revalidate, no-cache) may never be
// served stale, even when the origin is down (RFC 9111 §5.2.2.2, §4.2.4).
// Without a purge the edge forwards the origin's 503 once it has expired and the
// origin fails; after an operator's soft purge (meant to make the copy
// less usable) the same expired copy is served as stale-if-error.
//
// Failed before 2026-12-06; fixed: staleOnErrorOK no longer lets a soft purge lift these directives.
func TestS7SoftPurgeDoesNotLoosenMustRevalidate(t *testing.T) {
	for _, cc := range []string{"max-age=10, must-revalidate", "s-maxage=10", "max-age=10, proxy-revalidate", "max-age=100, no-cache"} {
		t.Run(cc, func(t *testing.T) {
			clk := &clock{now: t0}
			var down atomic.Bool
			h, _ := handlerProxy(t, func(w http.ResponseWriter, r *http.Request) {
				if down.Load() {
					w.WriteHeader(http.StatusServiceUnavailable)
					return
				}
				w.Header().Set("Date", clk.Now().Format(http.TimeFormat))
				w.Header().Set("Cache-Control", cc)
				w.Header().Set("ETag", `"a"`)
				_, _ = io.WriteString(w, "old content")
			}, func(c *Config) { c.Now = clk.Now })
			serve(h, "GET", "/ctl")
			serve(h, "GET", "/p")
			if _, err := h.Purge(PurgeRequest{URL: "http://example.com/p", Soft: true}); err != nil {
				t.Fatal(err)
			}
			down.Store(true)
			clk.Set(t0.Add(30 * time.Second))
			// Control: the same response, not purged, expired, origin failing.
			ctl := serve(h, "GET", "/ctl")
			t.Logf("control (no purge): %d %s %q", ctl.Code, ctl.Header().Get("Cache-Status"), ctl.Body.String())
			w := serve(h, "GET", "/p")
			t.Logf("after soft purge: %d %s %q", w.Code, w.Header().Get("Cache-Status"), w.Body.String())
			if ctl.Body.String() != "old content" && w.Body.String() == "old content" {
				t.Errorf("Cache-Control %q: after a soft purge the expired copy is served on origin failure (%d, Cache-Status %q), "+
					"though the same copy unpurged is not (%d): the purge loosened %q",
					cc, w.Code, w.Header().Get("Cache-Status"), ctl.Code, cc)
			}
		})
	}
}
