package cluster

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edgecache/edge/proxy"
	"github.com/edgecache/edge/routing"
)

// s69Origin answers each request with the user who sent it (its cookie)
// and a count, under the headers s69Pages gives the path's first segment.
type s69Origin struct {
	n      atomic.Int64
	status atomic.Int32 // non-zero: every answer is this status, no body
}

// s69Pages are the origin's pages, by the path's first segment.
var s69Pages = map[string]http.Header{
	// Today's fix (c8f2a02): a Vary element that is no field name is *.
	"varyjunk": {"Cache-Control": {"public, max-age=600"}, "Vary": {"Accept-Encoding Cookie"}},
	// Today's fix: the words private/no-store in a junk directive count.
	"ccjunk": {"Cache-Control": {"public, max-age=600, private; no-store"}},
	// Today's fix: Surrogate-Control governs only when it says something
	// about caching; here it does not, and Cache-Control says private.
	"surrogate": {"Cache-Control": {"private, max-age=600"}, "Surrogate-Control": {`content="ESI/1.0"`}},
	// Never fresh, validatable: kept only to be validated (max-stale must
	// not serve it: 5e5a539).
	"neverfresh": {"Cache-Control": {"max-age=0"}, "Last-Modified": {"Mon, 01 Jan 2024 00:00:00 GMT"}},
	// Stale by 90 s on arrival, with a long stale-while-revalidate window:
	// a client's max-stale=10 bounds it (5e5a539).
	"swr": {"Cache-Control": {"public, max-age=10, stale-while-revalidate=3600"}, "Age": {"100"}},
	// Stale on arrival, stale-if-error for an hour: only 500–504 count.
	"sie": {"Cache-Control": {"public, max-age=10, stale-if-error=3600"}, "Age": {"100"}},
}

func (o *s69Origin) Fetch(ctx context.Context, fr proxy.FetchRequest) (proxy.Result, error) {
	n := o.n.Add(1)
	if st := o.status.Load(); st != 0 {
		return proxy.Result{Resp: &http.Response{StatusCode: int(st), Header: http.Header{"Content-Length": {"0"}}, Body: http.NoBody}, Keep: true}, nil
	}
	seg := strings.Split(strings.TrimPrefix(fr.Req.URL.Path, "/"), "/")[0]
	h := s69Pages[seg].Clone()
	if h == nil {
		h = http.Header{"Cache-Control": {"public, max-age=600"}}
	}
	h.Set("Content-Type", "text/plain")
	body := "for " + fr.Req.Header.Get("Cookie") + " #" + string(rune('0'+n%10))
	return proxy.Result{Resp: &http.Response{StatusCode: 200, Header: h, Body: io.NopCloser(strings.NewReader(body)), ContentLength: int64(len(body))}, Keep: true}, nil
}

// s69Pair starts an ingress A and a home H, and returns a path under
// prefix homed at H.
func s69Pair(t *testing.T, o proxy.Fetcher, prefix string) (a, h *realNode, path string) {
	t.Helper()
	nodes := startRealNodes(t, []string{"A", "H"}, routing.ModeHybrid, 2, 2*time.Second, o)
	a, h = nodes["A"], nodes["H"]
	for i := range 100000 {
		p := "/" + prefix + "/" + strconv.Itoa(i)
		if rankingOf(a, p)[0] == "H" {
			return a, h, p
		}
	}
	t.Fatal("no page homed at H")
	return
}

func s69Get(n *realNode, path string, hdr ...string) *httptest.ResponseRecorder {
	r := httptest.NewRequest("GET", "http://site.example"+path, nil)
	for i := 0; i+1 < len(hdr); i += 2 {
		r.Header.Set(hdr[i], hdr[i+1])
	}
	w := httptest.NewRecorder()
	n.ph.ServeHTTP(w, r)
	n.ph.Wait()
	return w
}

// TestS69TodaysStorabilityFixesHoldThroughTheHome: alice's answer for each
// of today's not-to-be-shared shapes, fetched through the ingress A (its
// home H fetches it), is never bob's at A or at H, in either order of
// asking, as a single node never hands it over.
func TestS69TodaysStorabilityFixesHoldThroughTheHome(t *testing.T) {
	for _, seg := range []string{"varyjunk", "ccjunk", "surrogate"} {
		t.Run(seg, func(t *testing.T) {
			o := &s69Origin{}
			a, h, path := s69Pair(t, o, seg)
			for range 3 { // past the ingress's q-rule (Q=2)
				if w := s69Get(a, path, "Cookie", "u=alice"); !strings.Contains(w.Body.String(), "u=alice") {
					t.Fatalf("alice at A: %d %q", w.Code, w.Body.String())
				}
			}
			for _, n := range []*realNode{a, h} {
				w := s69Get(n, path, "Cookie", "u=bob")
				if strings.Contains(w.Body.String(), "alice") {
					t.Errorf("bob at %s got alice's answer %q (%s)", n.id, w.Body.String(), w.Header().Get("Cache-Status"))
				}
			}
		})
	}
}

// TestS69MaxStaleThroughTheHome: a client's max-stale travels with the
// climb to the home, where ServeHTTP reads it: the home must neither
// serve alice's never-fresh copy to bob, nor a copy staler than bob's
// bound under its stale-while-revalidate window.
func TestS69MaxStaleThroughTheHome(t *testing.T) {
	t.Run("never-fresh", func(t *testing.T) {
		o := &s69Origin{}
		a, h, path := s69Pair(t, o, "neverfresh")
		if w := s69Get(h, path, "Cookie", "u=alice"); !strings.Contains(w.Body.String(), "alice") {
			t.Fatalf("alice at H: %q", w.Body.String())
		}
		w := s69Get(a, path, "Cookie", "u=bob", "Cache-Control", "max-stale=3600")
		if strings.Contains(w.Body.String(), "alice") {
			t.Errorf("bob (max-stale) at A got alice's never-fresh copy from H: %q (%s)", w.Body.String(), w.Header().Get("Cache-Status"))
		}
	})
	t.Run("swr-bounded", func(t *testing.T) {
		o := &s69Origin{}
		a, h, path := s69Pair(t, o, "swr")
		first := s69Get(h, path).Body.String()
		before := o.n.Load()
		w := s69Get(a, path, "Cache-Control", "max-stale=10")
		if w.Body.String() == first || o.n.Load() == before {
			t.Errorf("max-stale=10 at A got H's copy stale by 90 s: %q (%s), origin fetches %d→%d", w.Body.String(), w.Header().Get("Cache-Status"), before, o.n.Load())
		}
	})
}

// TestS69StaleIfErrorThroughTheHome: H holds a stale-if-error copy; the
// origin now answers 501 (no failure: the origin's definite answer): the
// client at A gets the 501, not H's stale copy; with a 503 it gets the
// copy (the control).
func TestS69StaleIfErrorThroughTheHome(t *testing.T) {
	for _, c := range []struct {
		status int
		stale  bool
	}{{501, false}, {503, true}} {
		o := &s69Origin{}
		a, h, path := s69Pair(t, o, "sie")
		first := s69Get(h, path).Body.String()
		o.status.Store(int32(c.status))
		w := s69Get(a, path)
		if got := w.Body.String() == first; got != c.stale {
			t.Errorf("origin %d: A answered %d %q (%s), stale copy served %v, want %v", c.status, w.Code, w.Body.String(), w.Header().Get("Cache-Status"), got, c.stale)
		}
	}
}

// TestS69ProbeNeverAnswersANeverFreshCopy: the home holds alice's
// never-fresh copy (max-age=0, validatable) and a copy stale by 90 s
// inside a stale-while-revalidate window; a probe (only-if-cached) as bob
// is answered with neither as a fresh hit (504, or a stale answer the
// ingress does not count as a win), on the read loop or through net/http.
func TestS69ProbeNeverAnswersANeverFreshCopy(t *testing.T) {
	_, ph, p, plain, in := peerHitHome(t, proxy.DefaultConfig(), func(w http.ResponseWriter, r *http.Request) {
		seg := strings.Split(strings.TrimPrefix(r.URL.Path, "/"), "/")[0]
		for k, v := range s69Pages[seg] {
			w.Header()[k] = v
		}
		_, _ = io.WriteString(w, "for "+r.Header.Get("Cookie"))
	})
	for _, path := range []string{"/neverfresh/1", "/swr/1"} {
		_, first := signedGet(t, in, p, "GET", path, "climb", "Cookie", "u=alice")
		ph.Wait()
		if !strings.Contains(first, "alice") {
			t.Fatalf("%s: alice's climb got %q", path, first)
		}
		for _, peer := range []*Peer{p, plain} {
			resp, got := signedGet(t, in, peer, "GET", path, "probe", "Cookie", "u=bob")
			win := fromStore(resp) && !proxy.AnsweredStaleFromStore(resp.Header)
			if win && strings.Contains(got, "alice") {
				t.Errorf("%s probe as bob: a win with alice's copy %q (%d, %s)", path, got, resp.StatusCode, resp.Header.Get("Cache-Status"))
			}
			if path == "/neverfresh/1" && resp.StatusCode != http.StatusGatewayTimeout {
				t.Errorf("%s probe as bob: %d %q (%s), want 504", path, resp.StatusCode, got, resp.Header.Get("Cache-Status"))
			}
		}
	}
}
