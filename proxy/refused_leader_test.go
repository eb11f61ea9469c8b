package proxy

import (
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"
)

// waitingOnAFill reports whether some goroutine is blocked in fill.wait
// (a request that joined a fetch under way).
func waitingOnAFill() bool {
	buf := make([]byte, 1<<20)
	return strings.Contains(string(buf[:runtime.Stack(buf, true)]), "proxy.(*fill).wait(")
}

// A request that joined a fetch whose leader was then refused an upstream
// slot (the leader's client at limits.max_inflight_per_client, or no slot
// free at that instant) is not refused with it: it asks again and leads
// its own fetch. Before, it got the leader's 503, one client's bound
// turning away another's request.
func TestAJoinerOfARefusedLeaderFetchesForItself(t *testing.T) {
	h, calls := handlerProxy(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=600")
		_, _ = io.WriteString(w, "page")
	}, nil)
	// The leader, standing still between its join and its refusal.
	req := httptest.NewRequest("GET", "http://example.com/p", nil)
	ckey := coalesceKey(h.requestKey(req), h.varyKey(nil, req))
	f, leader := h.co.join(ckey, h.purges.Load(), fillWait{})
	if !leader {
		t.Fatal("the test's fill did not lead")
	}
	answered := make(chan *httptest.ResponseRecorder, 1)
	go func() { answered <- serve(h, "GET", "/p") }()
	waitUntil(t, "the second request waits on the leader's fill", waitingOnAFill)
	// What lead does when acquireUpstream refuses it.
	h.co.done(ckey, f)
	f.publish(nil, false, errOverload)

	w := <-answered
	if w.Code != http.StatusOK || w.Body.String() != "page" || calls.Load() != 1 {
		t.Fatalf("the joiner got %d %q (origin asked %d times), want the page it fetched itself", w.Code, w.Body.String(), calls.Load())
	}
}
