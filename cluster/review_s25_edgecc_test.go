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

// edgeNoStoreOrigin lets browsers keep a page an hour (Cache-Control:
// max-age=3600) but tells the edge not to store it (Edge-Cache-Control:
// no-store, the targeted field this cache obeys first): the page is the
// requesting user's own.
type edgeNoStoreOrigin struct{}

func (edgeNoStoreOrigin) Fetch(ctx context.Context, fr proxy.FetchRequest) (proxy.Result, error) {
	body := "for " + fr.Req.Header.Get("Cookie")
	h := http.Header{"Content-Type": {"text/plain"}, "Cache-Control": {"max-age=3600"}, "Edge-Cache-Control": {"no-store"}}
	return proxy.Result{Resp: &http.Response{StatusCode: 200, Header: h, Body: io.NopCloser(strings.NewReader(body)), ContentLength: int64(len(body))}, Keep: true}, nil
}

// A review found (now mended): the targeted field that decides storage is lost on the peer
// path, so one user's page is stored at the ingress and served to another.
// 316e73b keeps Edge-Cache-Control in the *stored* copy (sharedHeader), but
// a response the home does not store is passed to the asking peer through
// proxy.(*Handler).stream, which still calls removeEdgeHeaders
// (proxy/write.go stream): the ingress receives "Cache-Control:
// max-age=3600" alone, its effectiveCC no longer sees Edge-Cache-Control:
// no-store, and it stores the first user's page for an hour for everyone.
// (The same holds for Edge-Cache-Control: private, or a shorter max-age.)
// Fix: in stream, keep the policy's TargetedFields when the request is
// relayed by a peer (or never delete them from answers at all: they are
// the origin's, not the peer protocol's), so that every node decides from
// the origin's directives; or have the ingress refuse to keep a peer
// answer the home passed ("Cache-Status: …; fwd=…" without "stored").
func TestS25EdgeNoStorePassedByTheHomeIsStoredAtTheIngress(t *testing.T) {
	nodes := startRealNodes(t, []string{"A", "H"}, routing.ModeHybrid, 2, 2*time.Second, edgeNoStoreOrigin{})
	a := nodes["A"]
	var page string
	for i := 0; page == "" && i < 10000; i++ {
		if p := "/mine/" + strconv.Itoa(i); rankingOf(a, p)[0] == "H" {
			page = p
		}
	}
	ask := func(n *realNode, cookie string) *httptest.ResponseRecorder {
		r := httptest.NewRequest("GET", "http://site.example"+page, nil)
		r.Header.Set("Cookie", cookie)
		w := httptest.NewRecorder()
		n.ph.ServeHTTP(w, r)
		n.ph.Wait()
		return w
	}
	// Control: asked at the home itself, the page is never stored.
	if w := ask(nodes["H"], "user=carol"); !strings.Contains(w.Body.String(), "carol") {
		t.Fatalf("home: %q", w.Body.String())
	}
	for range 3 { // a node keeps a page from its 2nd request (q-rule)
		if w := ask(a, "user=alice"); !strings.Contains(w.Body.String(), "alice") {
			t.Fatalf("alice at A got %q (%s)", w.Body.String(), w.Header().Get("Cache-Status"))
		}
	}
	w := ask(a, "user=bob")
	if strings.Contains(w.Body.String(), "alice") {
		t.Errorf("bob at the ingress got %q (Cache-Status %q): alice's page, which the origin marked Edge-Cache-Control: no-store, was stored from the home's pass",
			w.Body.String(), w.Header().Get("Cache-Status"))
	}
	if w := ask(nodes["H"], "user=dave"); strings.Contains(w.Body.String(), "alice") || strings.Contains(w.Body.String(), "carol") {
		t.Errorf("dave at the home got %q", w.Body.String())
	}
}

// edgeShortOrigin: an hour for browsers, 1 s for the edge.
type edgeShortOrigin struct{ n *atomic.Int64 }

func (o edgeShortOrigin) Fetch(ctx context.Context, fr proxy.FetchRequest) (proxy.Result, error) {
	body := "version " + strconv.FormatInt(o.n.Add(1), 10)
	h := http.Header{"Content-Type": {"text/plain"}, "Cache-Control": {"max-age=3600"}, "Edge-Cache-Control": {"max-age=1"}}
	return proxy.Result{Resp: &http.Response{StatusCode: 200, Header: h, Body: io.NopCloser(strings.NewReader(body)), ContentLength: int64(len(body))}, Keep: true}, nil
}

// Held (a control for 316e73b's fix 5 on the peer path): a stored copy's
// Edge-Cache-Control reaches the asking peer signed (the MAC and the
// peer loop take it), and the ingress's copy lives by it, not by
// Cache-Control's hour.
func TestS25EdgeCacheControlLifetimeHoldsAcrossPeers(t *testing.T) {
	var n atomic.Int64
	nodes := startRealNodes(t, []string{"A", "H"}, routing.ModeHybrid, 2, 2*time.Second, edgeShortOrigin{&n})
	a := nodes["A"]
	var page string
	for i := 0; page == "" && i < 10000; i++ {
		if p := "/short/" + strconv.Itoa(i); rankingOf(a, p)[0] == "H" {
			page = p
		}
	}
	ask := func(n *realNode) *httptest.ResponseRecorder {
		w := httptest.NewRecorder()
		n.ph.ServeHTTP(w, httptest.NewRequest("GET", "http://site.example"+page, nil))
		n.ph.Wait()
		return w
	}
	ask(nodes["H"])
	for range 3 {
		if w := ask(a); w.Code != 200 || w.Body.String() != "version 1" {
			t.Fatalf("A: %d %q (%s)", w.Code, w.Body.String(), w.Header().Get("Cache-Status"))
		}
	}
	time.Sleep(2100 * time.Millisecond)
	if w := ask(a); w.Body.String() == "version 1" {
		t.Errorf("2 s after Edge-Cache-Control: max-age=1 the ingress served %q (%s)", w.Body.String(), w.Header().Get("Cache-Status"))
	}
}
