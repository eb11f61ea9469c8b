package proxy

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// s7rvGet sends a real HTTP/1.1 GET to the edge at base with the given
// header lines (name, value, name, value, ...; a name may repeat).
func s7rvGet(t *testing.T, c *http.Client, base, path string, hdr ...string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest("GET", base+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Add(hdr[i], hdr[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(b)
}

// TestS7VaryKeyKeepsApartOriginValuesTheOriginTellsApart: RFC 9111 §4.1 lets a
// cache match Vary'd field values only after normalising them "in a way
// that is known to have identical semantics, according to the header
// field's specification". VaryKey splits every field on commas and drops
// empty elements, as if each were a list; Origin is not a list (RFC 6454
// §7: one serialised origin or "null"). An attacker's
// "Origin: https://app.example," is a different value to the origin (an
// exact-match CORS allow-list refuses it) but gets the same variant key as
// the browser's "Origin: https://app.example": the attacker's refused
// answer (no Access-Control-Allow-Origin) is stored under the victim's
// variant and served to the victim, whose cross-origin fetch then fails
// (cache-poisoning DoS), and a victim arriving while the attacker's fill
// is in flight is collapsed onto it the same way.
//
// Failed before 2026-12-06; fixed: only list fields are read as lists (VaryKey).
func TestS7VaryKeyKeepsApartOriginValuesTheOriginTellsApart(t *testing.T) {
	const allowed = "https://app.example"
	var mu sync.Mutex
	var seen []string
	h, _ := handlerProxy(t, func(w http.ResponseWriter, r *http.Request) {
		o := r.Header.Get("Origin")
		mu.Lock()
		seen = append(seen, o)
		mu.Unlock()
		w.Header().Set("Cache-Control", "public, max-age=600")
		w.Header().Set("Vary", "Origin")
		if o == allowed {
			w.Header().Set("Access-Control-Allow-Origin", o)
			_, _ = io.WriteString(w, "cors ok for "+o)
			return
		}
		_, _ = io.WriteString(w, "origin refused: "+o)
	}, nil)
	edge := httptest.NewServer(h)
	defer edge.Close()
	c := edge.Client()

	// The attacker, first.
	_, ab := s7rvGet(t, c, edge.URL, "/api/data", "Origin", allowed+",")
	t.Logf("attacker: %q", ab)
	// The victim's browser.
	resp, body := s7rvGet(t, c, edge.URL, "/api/data", "Origin", allowed)
	t.Logf("victim: %q ACAO=%q Cache-Status=%q; origin saw %q", body, resp.Header.Get("Access-Control-Allow-Origin"), resp.Header.Get("Cache-Status"), seen)
	if resp.Header.Get("Access-Control-Allow-Origin") != allowed {
		t.Errorf("the victim (Origin %q) was served the answer the origin gave the attacker's Origin %q: body %q, no Access-Control-Allow-Origin "+
			"(Cache-Status %q): the Vary key treats the two values as one", allowed, allowed+",", body, resp.Header.Get("Cache-Status"))
	}
}

// TestS7VaryKeyNeverCollapsesOntoAnAttackersFill is the collapsing form of the
// above: the victim arrives while the attacker's fill is under way and is
// handed its answer.
//
// Failed before 2026-12-06; fixed: only list fields are read as lists (VaryKey).
func TestS7VaryKeyNeverCollapsesOntoAnAttackersFill(t *testing.T) {
	const allowed = "https://app.example"
	h, calls := handlerProxy(t, func(w http.ResponseWriter, r *http.Request) {
		o := r.Header.Get("Origin")
		time.Sleep(300 * time.Millisecond)
		w.Header().Set("Cache-Control", "public, max-age=600")
		w.Header().Set("Vary", "Origin")
		if o == allowed {
			w.Header().Set("Access-Control-Allow-Origin", o)
			_, _ = io.WriteString(w, "cors ok")
			return
		}
		_, _ = io.WriteString(w, "origin refused: "+o)
	}, nil)
	edge := httptest.NewServer(h)
	defer edge.Close()
	c := edge.Client()
	// First a plain request so the URL's Vary is known (the second pass
	// would otherwise sort the variants out).
	s7rvGet(t, c, edge.URL, "/api/other", "Origin", allowed)
	var wg sync.WaitGroup
	wg.Go(func() { s7rvGet(t, c, edge.URL, "/api/x", "Origin", " "+allowed+" ,, ") })
	time.Sleep(100 * time.Millisecond)
	resp, body := s7rvGet(t, c, edge.URL, "/api/x", "Origin", allowed)
	wg.Wait()
	t.Logf("victim: %q ACAO=%q %q; origin calls %d", body, resp.Header.Get("Access-Control-Allow-Origin"), resp.Header.Get("Cache-Status"), calls.Load())
	if !strings.Contains(body, "cors ok") {
		t.Errorf("the victim was handed the attacker's answer %q (Cache-Status %q)", body, resp.Header.Get("Cache-Status"))
	}
}
