package cluster

import (
	"context"
	"net/http"
	"net/http/httptest"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestS48StaleFallbackClientGoneMidFallback: the climb fails (origin
// down), the fallback asks X again, and X holds that second probe; the
// client goes away meanwhile. The request must end (nothing waits for X),
// serve nothing, leave no goroutine behind once X lets go, and count the
// fallback once.
func TestS48StaleFallbackClientGoneMidFallback(t *testing.T) {
	origin := &downableOrigin{}
	l := newBesideLab(t, false, origin)
	p := l.pageHomedAtH("/public/s48cancel")
	newFirstHopLabOn(t, l, p, false)
	time.Sleep(1100 * time.Millisecond)
	origin.down.Store(true)

	gate := make(chan struct{})
	var once sync.Once
	open := func() { once.Do(func() { close(gate) }) }
	t.Cleanup(open)
	var probes atomic.Int32
	second := make(chan struct{}, 1)
	holdX := func(r *http.Request) {
		if r.Header.Get(hdrMode) == hopProbe.String() && probes.Add(1) == 2 {
			second <- struct{}{}
			<-gate
		}
	}
	l.x.hold.Store(&holdX)
	before := runtime.NumGoroutine()

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	go func() {
		r := httptest.NewRequest("GET", "http://site.example"+p, nil).WithContext(ctx)
		w := httptest.NewRecorder()
		l.a.ph.ServeHTTP(w, r)
		done <- w.Code
	}()
	select {
	case <-second:
	case <-time.After(20 * time.Second):
		t.Fatal("the fallback never asked X")
	}
	cancel()
	select {
	case code := <-done:
		t.Logf("A answered %d after the client left", code)
	case <-time.After(20 * time.Second):
		t.Fatal("the request waited for X's held fallback probe after its client left")
	}
	l.a.ph.Wait()
	if got := testutil.ToFloat64(l.a.c.metrics.StaleFallbacks.WithLabelValues("served")); got != 0 {
		t.Errorf("served %v, want 0", got)
	}
	// The fill runs on without its client (requests joining it share
	// it), so the fallback waits out X's peer timeout and counts none, as
	// it should: X did not answer in time. (The review first read this as
	// a client's cancellation miscounted; "cancelled" is for a fill whose
	// own context ended.)
	if got := testutil.ToFloat64(l.a.c.metrics.StaleFallbacks.WithLabelValues("none")) + testutil.ToFloat64(l.a.c.metrics.StaleFallbacks.WithLabelValues("cancelled")); got != 1 {
		t.Errorf("edge_peer_stale_fallbacks_total{none}+{cancelled} %v, want 1", got)
	}
	open()
	eventually(t, 10*time.Second, "goroutines back", func() bool { return runtime.NumGoroutine() <= before+2 })
}
