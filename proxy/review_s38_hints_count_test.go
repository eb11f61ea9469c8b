package proxy

import (
	"io"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestS38HintsManyNoLinkAndOther1xxAreCountedAndCapped: an origin that
// sends a 102, a 103 without a Link, then six 103s with two Link lines
// each (and a field that must not go on). The client gets two 103s, each
// with both Link lines and nothing else, and no 102; the metric says 2
// relayed, 5 dropped (the Link-less one and the four past the cap), the
// 102 uncounted; the final answer carries no hint field. A HEAD miss gets
// its 103 too, and the cached page none afterwards.
func TestS38HintsManyNoLinkAndOther1xxAreCountedAndCapped(t *testing.T) {
	var calls atomic.Int64
	up := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		w.WriteHeader(http.StatusProcessing)
		w.Header().Set("X-Hint-Only", "1")
		w.WriteHeader(http.StatusEarlyHints) // no Link
		for range 6 {
			w.Header()["Link"] = []string{"</a.css>; rel=preload; as=style", "</b.js>; rel=preload; as=script"}
			w.WriteHeader(http.StatusEarlyHints)
		}
		w.Header().Del("Link")
		w.Header().Del("X-Hint-Only")
		w.Header().Set("Cache-Control", r.URL.Query().Get("cc"))
		_, _ = io.WriteString(w, "page")
	})
	h, front := s38HintsProxy(t, up, nil, false)

	code, hdr, body, hints := hintedGet(t, front.URL, "GET", "/many?cc=no-store")
	if code != 200 || body != "page" || hdr.Get("Link") != "" || hdr.Get("X-Hint-Only") != "" {
		t.Fatalf("final answer %d %q, Link %q, X-Hint-Only %q", code, body, hdr.Get("Link"), hdr.Get("X-Hint-Only"))
	}
	if len(hints) != 2 {
		t.Fatalf("the client got %d 1xx answers %v, want two 103s (the cap)", len(hints), hints)
	}
	for _, h := range hints {
		if h.Get(":status") != "103" || len(h["Link"]) != 2 || len(h) != 2 {
			t.Errorf("a relayed 1xx %v, want a 103 with the two Link lines only", h)
		}
	}
	if r, d := testutil.ToFloat64(h.metrics.earlyHints[hintsRelayed]), testutil.ToFloat64(h.metrics.earlyHints[hintsDropped]); r != 2 || d != 5 {
		t.Errorf("edge_early_hints_total relayed %v dropped %v, want 2 and 5", r, d)
	}

	// HEAD miss on a cacheable page: its 103s, then the cached page none.
	code, _, _, hints = hintedGet(t, front.URL, "HEAD", "/head?cc=max-age=600")
	if code != 200 || len(hints) != 2 {
		t.Fatalf("HEAD miss: %d, hints %v", code, hints)
	}
	code, _, body, hints = hintedGet(t, front.URL, "GET", "/head?cc=max-age=600")
	if code != 200 || body != "page" || len(hints) != 0 || calls.Load() != 2 {
		t.Fatalf("GET hit after the HEAD miss: %d %q, hints %v, origin asked %d times", code, body, hints, calls.Load())
	}
}

// TestS38AnOriginThatKeepsSendingHintsIsCutOff: an origin that sends 103s
// without end to a pass. The client gets the two the cap allows, then a
// 502 once the origin passes 16 informational answers (origin.max1xx;
// without the bound the fetch read 103s until origin.response_timeout);
// no write after the request ended (-race), and the pass ends.
func TestS38AnOriginThatKeepsSendingHintsIsCutOff(t *testing.T) {
	stop := make(chan struct{})
	var hinted atomic.Int64
	up := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for {
			w.Header().Set("Link", "</x.css>; rel=preload")
			w.WriteHeader(http.StatusEarlyHints)
			hinted.Add(1)
			select {
			case <-r.Context().Done():
				return
			case <-stop:
				_, _ = io.WriteString(w, "late")
				return
			case <-time.After(2 * time.Millisecond):
			}
		}
	})
	h, front := s38HintsProxy(t, up, nil, false)
	defer close(stop)
	code, _, _, hints := hintedGet(t, front.URL, "POST", "/p")
	if code != http.StatusBadGateway || len(hints) != 2 {
		t.Fatalf("an origin sending 103s without end: %d after %d 103s, want 502 after 2", code, len(hints))
	}
	waitUntil(t, "the pass ends", func() bool { return testutil.ToFloat64(h.metrics.InFlight) == 0 })
	if r := testutil.ToFloat64(h.metrics.earlyHints[hintsRelayed]); r != 2 {
		t.Errorf("relayed %v, want 2 (the cap)", r)
	}
	if n := hinted.Load(); n < 16 { // the 17th may be read before the origin counts it
		t.Fatalf("origin sent only %d 103s before the cut", n)
	}
}
