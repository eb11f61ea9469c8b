package proxy

import (
	"io"
	"net/http"
	"sync/atomic"
	"testing"
)

// TestATagPurgeDuringARevalidationIsNotUndoneByItsNotModified (a review's): a revalidation under way when a
// tag purge names the stale entry; the origin's 304 carries no tag of its
// own, so the merged header keeps the stale's tag and the 304 does not put
// the purged body back.
func TestATagPurgeDuringARevalidationIsNotUndoneByItsNotModified(t *testing.T) {
	const lm = "Mon, 01 Dec 2025 00:00:00 GMT"
	clk := &clock{now: t0}
	var version atomic.Int32
	gate, arrived := make(chan struct{}), make(chan struct{}, 1)
	var hold atomic.Bool
	h, _ := handlerProxy(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Date", clk.Now().Format(http.TimeFormat))
		w.Header().Set("Cache-Control", "max-age=1")
		w.Header().Set("Last-Modified", lm)
		if r.Header.Get("If-Modified-Since") == lm {
			if hold.Load() {
				arrived <- struct{}{}
				<-gate
			}
			w.WriteHeader(http.StatusNotModified)
			return
		}
		w.Header().Set("Surrogate-Key", "doc")
		_, _ = io.WriteString(w, []string{"old!", "new!"}[version.Load()])
	}, func(c *Config) { c.Now = clk.Now })
	serve(h, "GET", "/doc")
	clk.Set(t0.Add(10e9))
	hold.Store(true)
	done := make(chan struct{})
	go func() { serve(h, "GET", "/doc"); close(done) }()
	<-arrived
	hold.Store(false)
	version.Store(1)
	if n, err := h.Purge(PurgeRequest{Tag: "doc"}); err != nil || n != 1 {
		t.Fatalf("purge %d %v", n, err)
	}
	close(gate)
	<-done
	if w := serve(h, "GET", "/doc"); w.Body.String() != "new!" {
		t.Errorf("after the tag purge: %q", w.Body.String())
	}
}
