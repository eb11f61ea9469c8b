package cluster

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edgecache/edge/proxy"
)

// s53BigSWROrigin answers every page with a body too large to sit in a
// connection's read buffer (so a peer's answer of it streams), fresh for
// a second and servable stale for ten minutes; down makes it fail.
type s53BigSWROrigin struct {
	n     atomic.Int64 // answers given
	tries atomic.Int64 // fetches asked, failed ones included
	down  atomic.Bool
	size  int
}

func (o *s53BigSWROrigin) body(v int64) []byte {
	b := bytes.Repeat([]byte("0123456789abcdef"), o.size/16)
	copy(b, "v"+strconv.FormatInt(v, 10)+" ")
	return b
}

func (o *s53BigSWROrigin) Fetch(ctx context.Context, fr proxy.FetchRequest) (proxy.Result, error) {
	o.tries.Add(1)
	if o.down.Load() {
		return proxy.Result{}, errors.New("origin down")
	}
	b := o.body(o.n.Add(1))
	h := http.Header{"Cache-Control": {"public, max-age=1, stale-while-revalidate=600"}, "Content-Type": {"application/octet-stream"},
		"Content-Length": {strconv.Itoa(len(b))}}
	return proxy.Result{Resp: &http.Response{StatusCode: 200, Header: h, Body: io.NopCloser(bytes.NewReader(b)), ContentLength: int64(len(b))}, Keep: true}, nil
}

// TestS53StaleWhileClimbingFailedClimbCutsTheStaleBody: stale while
// climbing is on; X holds a large page stale within its window, H (the
// page's home, A's first hop) does not, and the origin is down. A's climb
// fails while X's stale copy, asked again, is still on its way; staleBeside
// then takes the stale answer (the failure fallback) — but it ends the
// stale fallback's context (cancelStale) before it returns that answer,
// whose body streams under that very context. The client should get X's
// whole stale copy, as staleOnFailure (the same fallback without the
// race) gives it.
//
// The control (stale while climbing off: staleOnFailure, which asks X
// after the climb failed, under the request's own context) serves the
// whole copy.
func TestS53StaleWhileClimbingFailedClimbCutsTheStaleBody(t *testing.T) {
	for _, swc := range []bool{false, true} {
		t.Run("stale_while_climbing="+strconv.FormatBool(swc), func(t *testing.T) { s53FailedClimbStaleBody(t, swc) })
	}
}

func s53FailedClimbStaleBody(t *testing.T, swc bool) {
	origin := &s53BigSWROrigin{size: 896 << 10}
	l := newBesideLab(t, false, origin)
	l.a.c.cfg.StaleWhileClimbing = swc
	l.a.c.cfg.PeerWholeBytes = 128 << 10 // the default: a larger answer streams past its first 128 KiB
	p := l.pageHomedAtH("/public/s53cut")
	newFirstHopLabOn(t, l, p, true) // X holds p, positively indicated at A
	if _, err := l.h.ph.Purge(proxy.PurgeRequest{URL: "http://site.example" + p}); err != nil {
		t.Fatal(err)
	}
	want := origin.body(1)
	time.Sleep(2100 * time.Millisecond) // X's copy (max-age=1) is stale now, within its window
	origin.down.Store(true)
	triesBefore := origin.tries.Load()

	// X's second probe (the stale copy asked again) is held until A's
	// climb has failed: H's origin fetch and A's own both tried.
	gate := make(chan struct{})
	var once sync.Once
	release := func() { once.Do(func() { close(gate) }) }
	t.Cleanup(release)
	var probes atomic.Int32
	l.firstHopFirst(func(r *http.Request) {
		if r.Header.Get(hdrMode) == hopProbe.String() && probes.Add(1) == 2 {
			<-gate
		}
	})
	stop := make(chan struct{})
	t.Cleanup(func() { close(stop) })
	go func() {
		defer release()
		for deadline := time.Now().Add(20 * time.Second); origin.tries.Load()-triesBefore < 2 && time.Now().Before(deadline); {
			select {
			case <-stop:
				return
			case <-time.After(time.Millisecond):
			}
		}
		// Let the failed climb reach staleBeside's select (ordering only;
		// X's probe has the whole peer timeout, 2 s, to answer).
		select {
		case <-stop:
		case <-time.After(200 * time.Millisecond):
		}
	}()
	w, aborted := s53Ask(l.a, p)
	t.Logf("origin tries %d, X probes %d, fallbacks served %v served_early %v none %v",
		origin.tries.Load()-triesBefore, probes.Load(), l.staleFallbacks("served"), l.staleFallbacks("served_early"), l.staleFallbacks("none"))
	if l.staleFallbacks("served") != 1 {
		t.Skipf("the race did not go the failed-climb way (served %v, served_early %v)", l.staleFallbacks("served"), l.staleFallbacks("served_early"))
	}
	if aborted || w.Code != 200 || !bytes.Equal(w.Body.Bytes(), want) {
		t.Fatalf("A answered %d with %d of the stale copy's %d bytes (aborted mid-body: %v): the stale body was cut", w.Code, w.Body.Len(), len(want), aborted)
	}
}

// s53Ask asks n for p as a client would, and reports whether the proxy
// aborted the answer mid-body (net/http's ErrAbortHandler: the client's
// connection is cut, its body short).
func s53Ask(n *realNode, p string) (w *httptest.ResponseRecorder, aborted bool) {
	w = httptest.NewRecorder()
	func() {
		defer func() {
			if v := recover(); v != nil {
				if v != http.ErrAbortHandler {
					panic(v)
				}
				aborted = true
			}
		}()
		n.ph.ServeHTTP(w, httptest.NewRequest("GET", "http://site.example"+p, nil))
	}()
	n.ph.Wait()
	return w, aborted
}

// TestS53StaleServedEarlyLargeBodyIsWhole pins the branch that gets it
// right: the stale copy answers while the climb waits on a slow origin
// (served early), and its body, streaming past the first 128 KiB, reaches
// the client whole (cancelStale waits for the body's close there).
func TestS53StaleServedEarlyLargeBodyIsWhole(t *testing.T) {
	origin := &s53BigSWROrigin{size: 896 << 10}
	gate := &originGate{inner: origin}
	t.Cleanup(gate.open)
	l := newBesideLab(t, false, gate)
	l.a.c.cfg.StaleWhileClimbing = true
	l.a.c.cfg.PeerWholeBytes = 128 << 10
	p := l.pageHomedAtH("/public/s53early")
	newFirstHopLabOn(t, l, p, true)
	if _, err := l.h.ph.Purge(proxy.PurgeRequest{URL: "http://site.example" + p}); err != nil {
		t.Fatal(err)
	}
	want := origin.body(1)
	time.Sleep(2100 * time.Millisecond)
	l.firstHopFirst(nil)
	type answer struct {
		w       *httptest.ResponseRecorder
		aborted bool
	}
	ans, ok := askWhileHeld(gate, func() answer { w, a := s53Ask(l.a, p); return answer{w, a} })
	gate.open()
	if !ok {
		t.Skip("not served early (A waited for the origin)")
	}
	if ans.aborted || ans.w.Code != 200 || !bytes.Equal(ans.w.Body.Bytes(), want) {
		t.Fatalf("served early: %d with %d of %d bytes (aborted: %v)", ans.w.Code, ans.w.Body.Len(), len(want), ans.aborted)
	}
	if got := l.staleFallbacks("served_early"); got != 1 {
		t.Errorf("served_early %v, want 1", got)
	}
}
