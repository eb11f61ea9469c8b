package proxy

import (
	"io"
	"net/http"
	"sync/atomic"
	"testing"
	"time"
)

// A review found (now mended): collapsing hands followers what a 304 told one user alone. A
// stale copy stored from an anonymous 200 carrying CDN-Cache-Control is
// revalidated by alice (the origin personalises on X-User, declared
// unkeyed as in every leaks test); the slow origin answers her 304 with
// `Cache-Control: private` and X-Account: alice. Anonymous followers that
// arrived during the revalidation joined it (fetchAndServe), and
// revalidated published the merged entry as shared, because
// shareable/storableUnder read the stored CDN-Cache-Control (RFC 9213
// precedence) instead of the 304's private: every follower gets
// X-Account: alice and `Cache-Control: private` as a collapsed answer.
// Where: proxy/fetch.go revalidated -> shareable (merged header); the
// waiter check in fetchAndServe only checks variant and freshness.
// Fix: as in TestS28A304PrivateIsNotOverriddenByTheStoredTargetedField:
// a 304 whose own directives forbid storing is its requester's alone
// (publish nil, not shared), whatever a stored targeted field says.
func TestS28CollapsedFollowersGetAPrivate304UnderATargetedField(t *testing.T) {
	clk := &clock{now: t0}
	var n atomic.Int32
	h, _ := handlerProxy(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Date", clk.Now().Format(http.TimeFormat))
		w.Header().Set("ETag", `"e"`)
		if r.Header.Get("If-None-Match") == `"e"` {
			if n.Add(1) == 1 {
				time.Sleep(400 * time.Millisecond) // the leader is slow at the origin
			}
			if u := r.Header.Get("X-User"); u != "" {
				w.Header().Set("Cache-Control", "private, max-age=600")
				w.Header().Set("X-Account", u)
			}
			w.WriteHeader(http.StatusNotModified)
			return
		}
		w.Header().Set("Cache-Control", "max-age=1")
		w.Header().Set("CDN-Cache-Control", "max-age=1")
		_, _ = io.WriteString(w, "shared page")
	}, func(c *Config) { c.Now = clk.Now })
	edge := s7rvEdge(t, h)
	s7rvDo(edge, "prime", "GET", "/p", nil)
	clk.Set(t0.Add(10 * time.Second))
	out := s7rvCollapseAt(t, h, edge, "/p", []string{"X-User", "alice"},
		map[string][]string{"f1": nil, "f2": nil, "head": nil, "range": {"Range", "bytes=0-3"}}, map[string]string{"head": "HEAD"})
	out = append(out, s7rvDo(edge, "after", "GET", "/p", nil))
	for _, a := range out[1:] {
		if a.hdr.Get("X-Account") == "alice" {
			t.Errorf("%s (anonymous) got X-Account: alice, Cache-Control %q, Cache-Status %q: a field of the private 304 that answered alice",
				a.who, a.hdr.Get("Cache-Control"), a.hdr.Get("Cache-Status"))
		}
	}
}
