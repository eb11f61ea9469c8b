package proxy

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
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

// The same for a slice of a large object: a reader that joined the
// fetch of a slice whose leader was refused a slot fetches it itself
// rather than answer 503 (a review, by reading; sliceFailed turned the
// leader's errOverload into every joiner's 503).
func TestAJoinerOfARefusedSliceFetchFetchesItself(t *testing.T) {
	o := newSliceOrigin(8 << 20)
	h := sliceProxy(t, o)
	if w := serve(h, "GET", "/movie.mp4", "Range", "bytes=0-0"); w.Code != http.StatusPartialContent {
		t.Fatalf("first byte: %d", w.Code)
	}
	// The leader of slice 3's fetch, standing still until the reader has
	// joined, then refused a slot as fetchSliceAs is.
	skey := sliceKey(h.requestKey(httptest.NewRequest("GET", "http://example.com/movie.mp4", nil)), 3)
	release, led := refusedSliceFlight(t, h, skey)
	const at = 3<<20 + 5
	answered := make(chan *httptest.ResponseRecorder, 1)
	go func() { answered <- serve(h, "GET", "/movie.mp4", "Range", "bytes=3145733-3145733") }()
	waitUntil(t, "the reader waits on the flight", func() bool {
		h.slices.mu.Lock()
		defer h.slices.mu.Unlock()
		f := h.slices.m[skey]
		return f != nil && f.waiters > 0
	})
	release()
	if err := <-led; !errors.Is(err, errOverload) {
		t.Fatalf("the test's leader: %v", err)
	}
	w := <-answered
	if w.Code != http.StatusPartialContent || w.Body.Len() != 1 || w.Body.Bytes()[0] != o.body[at] {
		t.Fatalf("the reader that joined a refused slice fetch got %d (%d bytes), want its byte", w.Code, w.Body.Len())
	}
}

// refusedSliceFlight leads the flight of slice key skey on h the way a
// reader refused an upstream slot does (fetchSliceAs's errOverload), held
// until release is called; led gets the leader's error.
func refusedSliceFlight(t *testing.T, h *Handler, skey string) (release func(), led <-chan error) {
	t.Helper()
	gate := make(chan struct{})
	out := make(chan error, 1)
	go func() {
		_, _, _, err := h.slices.do(skey, fillWait{}, h.purges.Load(), func() (any, error) {
			<-gate
			return fetchedSlice{}, errOverload
		})
		out <- err
	}()
	waitUntil(t, "the refused leader's flight is up", func() bool {
		h.slices.mu.Lock()
		defer h.slices.mu.Unlock()
		return h.slices.m[skey] != nil
	})
	return sync.OnceFunc(func() { close(gate) }), out
}
