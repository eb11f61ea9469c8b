package proxy

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// TestS8DropUnreachableRacesAFillInFlight: a fill that began under the
// host's old site (the request was resolved on the old table) stores its
// answer under the old site's key after the reload's DropUnreachable has
// run. Nothing reaches that key and no purge names it (a purge names the
// URL under the host's new site), so rolling the reload back serves what
// was purged in between: the very undoing DropUnreachable was added for.
//
// Failed before 2026-12-06; fixed: DropUnreachable acts as a purge for fills in flight.
func TestS8DropUnreachableRacesAFillInFlight(t *testing.T) {
	var site atomic.Value
	site.Store("old")
	var version atomic.Int64
	version.Store(1)
	release := make(chan struct{})
	entered := make(chan struct{}, 1)
	var first atomic.Bool
	h, _ := handlerProxy(t, func(w http.ResponseWriter, r *http.Request) {
		v := version.Load()
		if first.CompareAndSwap(false, true) {
			entered <- struct{}{}
			<-release // a slow origin: the reload happens meanwhile
		}
		w.Header().Set("Cache-Control", "max-age=600")
		_, _ = io.WriteString(w, "v"+string(rune('0'+v)))
	}, func(c *Config) { c.SiteOf = func(string) string { return site.Load().(string) } })

	oldSite := NewSite("old", false, nil)
	done := make(chan *httptest.ResponseRecorder, 1)
	go func() {
		r := httptest.NewRequest("GET", "http://example.com/a", nil)
		w := httptest.NewRecorder()
		h.ServeInbound(w, r, Inbound{Site: oldSite}) // resolved on the old table
		done <- w
	}()
	select {
	case <-entered:
	case <-time.After(5 * time.Second):
		t.Fatal("the fill never reached the origin")
	}
	// The reload: the host now belongs to site "new"; DropUnreachable runs.
	site.Store("new")
	if n := h.DropUnreachable(); n != 0 {
		t.Logf("dropped %d at the reload", n)
	}
	close(release)
	if w := <-done; w.Body.String() != "v1" {
		t.Fatalf("in-flight request got %q", w.Body.String())
	}
	h.Wait()

	var left []string
	for _, k := range h.store.Keys(func(string) bool { return true }) {
		if strings.HasPrefix(k, "old ") {
			left = append(left, k)
		}
	}

	// The page changes and is purged (under the host's site of today).
	version.Store(2)
	if _, err := h.Purge(PurgeRequest{URL: "http://example.com/a"}); err != nil {
		t.Fatal(err)
	}
	// The reload is rolled back: the host is "old" again.
	site.Store("old")
	h.DropUnreachable()
	got := serve(h, "GET", "/a").Body.String()
	if len(left) > 0 || got != "v2" {
		t.Errorf("a fill in flight across the reload stored %q after DropUnreachable ran; after a purge and rolling the reload back, a client got %q, want the purged page's new version \"v2\"", left, got)
	}
}
