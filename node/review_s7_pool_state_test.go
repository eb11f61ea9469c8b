package node

import (
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"
)

// TestS7UnrelatedReloadRemembersThatAnOriginIsDown: every reload builds
// every site's pool anew, so a reload that changes nothing about a pool
// (here only log.level) puts an origin the pool had ejected (it answers
// 503) back in rotation: it gets client requests again at once (each
// one a failure and a retry), and its health state on /status resets to
// up. An operator reloading for an unrelated reason (another site, a log
// level) does not expect a known-dead origin to be tried again.
//
// Failed before 2026-12-06; fixed: origin.Pool.CarryState keeps the ejection.
func TestS7UnrelatedReloadRemembersThatAnOriginIsDown(t *testing.T) {
	good := newS7Origin(t, "GOOD")
	good.cc.Store("no-store")
	var deadCalls atomic.Int64
	dead := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		deadCalls.Add(1)
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = io.WriteString(w, "down")
	}))
	defer dead.Close()
	body := "sites:\n" + s7Site("shop", []string{"shop.test"}, []string{good.URL, dead.URL}, "")
	n := startS7Node(t, body)
	for i := range 20 {
		n.get("shop.test", "/a/"+string(rune('a'+i)))
	}
	up := func() bool {
		for _, s := range n.siteStatus() {
			for _, o := range s.Origins {
				if o.URL == dead.URL {
					return o.Up
				}
			}
		}
		return true
	}
	if up() {
		t.Fatalf("the 503 origin was not ejected after 20 requests (%d reached it)", deadCalls.Load())
	}
	before := deadCalls.Load()
	for i := range 10 {
		n.get("shop.test", "/b/"+string(rune('a'+i)))
	}
	if d := deadCalls.Load() - before; d != 0 {
		t.Logf("while ejected, the dead origin got %d requests", d)
	}
	if code, b := n.reload("log:\n  level: debug\n" + body); code != 200 {
		t.Fatalf("reload: %d %s", code, b)
	}
	wasUp := up()
	before = deadCalls.Load()
	for i := range 10 {
		n.get("shop.test", "/c/"+string(rune('a'+i)))
	}
	if d := deadCalls.Load() - before; d > 0 || wasUp {
		t.Errorf("after a reload that changed only log.level, the ejected origin shows up=%v and got %d of 10 client requests "+
			"(each a failure and a retry): its ejection was forgotten", wasUp, d)
	}
}

// TestSiteTotalsCountRequestsInFlightAcrossAReload: a request that began
// before a reload and ends after it is in the site's totals (the status
// page's requests per site). The reloaded site copied the old one's counts
// when it replaced it, so a request still finishing on the old one was
// lost; the two now share their counters.
func TestSiteTotalsCountRequestsInFlightAcrossAReload(t *testing.T) {
	release := make(chan struct{})
	started := make(chan struct{}, 1)
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			started <- struct{}{}
			<-release
		}
		w.Header().Set("Cache-Control", "no-store")
		_, _ = io.WriteString(w, "page")
	}))
	defer slow.Close()
	body := "sites:\n" + s7Site("shop", []string{"shop.test"}, []string{slow.URL}, "")
	n := startS7Node(t, body)
	n.get("shop.test", "/a")
	done := make(chan struct{})
	go func() { defer close(done); n.get("shop.test", "/slow") }()
	<-started
	if code, b := n.reload("log:\n  level: debug\n" + body); code != 200 {
		t.Fatalf("reload: %d %s", code, b)
	}
	close(release)
	<-done
	n.get("shop.test", "/b")
	// A request is counted after its response is written (as the latency
	// histogram is), so the client can read the page a moment before the
	// count moves: wait for it, and fail only if it never reaches 3 or
	// passes it.
	var got uint64
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		got = 0
		for _, s := range n.siteStatus() {
			if s.Name == "shop" {
				got = s.Requests
			}
		}
		if got >= 3 {
			break
		}
	}
	if got != 3 {
		t.Errorf("site shop counts %d requests, want 3 (one before the reload, one across it, one after)", got)
	}
}
