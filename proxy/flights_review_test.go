package proxy

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestFlightsSurviveAPanicAndGoexit: a leader whose fn panics or calls
// runtime.Goexit leaves no entry behind, and its waiters get
// errFlightAbandoned, not a hang.
func TestFlightsSurviveAPanicAndGoexit(t *testing.T) {
	for _, how := range []string{"panic", "goexit"} {
		var g flights
		started, release := make(chan struct{}), make(chan struct{})
		go func() {
			defer func() { _ = recover() }()
			g.do("k", fillWait{}, 0, func() (any, error) {
				close(started)
				<-release
				if how == "panic" {
					panic("boom")
				}
				runtime.Goexit()
				return nil, nil
			})
		}()
		<-started
		got := make(chan error, 1)
		go func() {
			_, shared, _, err := g.do("k", fillWait{}, 0, func() (any, error) { return "ran", nil })
			if !shared {
				err = fmt.Errorf("not shared: %v", err)
			}
			got <- err
		}()
		for w := 0; w < 1; time.Sleep(time.Millisecond) {
			g.mu.Lock()
			w = g.m["k"].waiters
			g.mu.Unlock()
		}
		close(release)
		select {
		case err := <-got:
			if !errors.Is(err, errFlightAbandoned) {
				t.Errorf("%s: waiter got %v", how, err)
			}
		case <-time.After(2 * time.Second):
			t.Fatalf("%s: waiter hangs", how)
		}
		g.mu.Lock()
		n := len(g.m)
		g.mu.Unlock()
		if n != 0 {
			t.Errorf("%s: %d entries left", how, n)
		}
	}
}

// TestFlightsUnderConcurrency: many callers at random places in the wait
// order; every caller gets a result from a fn that ran for its key, apart
// callers run concurrently with the leader, the map ends empty. With
// -race.
func TestFlightsUnderConcurrency(t *testing.T) {
	var g flights
	var running [4]atomic.Int32
	var maxConc atomic.Int32
	var wg sync.WaitGroup
	for i := range 400 {
		wg.Go(func() {
			k := i % 4
			w := fillWait{order: WaitOrder{At: int64(rand.IntN(50)), Tie: 1}, climb: rand.IntN(2) == 0, direct: rand.IntN(4) == 0}
			v, _, _, err := g.do(fmt.Sprint(k), w, 0, func() (any, error) {
				n := running[k].Add(1)
				for {
					m := maxConc.Load()
					if n <= m || maxConc.CompareAndSwap(m, n) {
						break
					}
				}
				time.Sleep(time.Duration(rand.IntN(200)) * time.Microsecond)
				running[k].Add(-1)
				return k, nil
			})
			if err != nil || v != k {
				t.Errorf("key %d: %v, %v", k, v, err)
			}
		})
	}
	wg.Wait()
	if len(g.m) != 0 {
		t.Errorf("%d entries left", len(g.m))
	}
	t.Logf("at most %d fns ran at once for one key", maxConc.Load())
}

// TestASliceFlightIsNotJoinedAfterAPurge: the coalescer never lets a
// request join a fill started before a later purge (TestJoinAfterPurge);
// the slices' singleflight, and flights' first version, had no such check
// (a hostile review): a slice fetch under way when the object was purged
// was joined by a request made after the purge, which was served the
// purged bytes (the origin kept its validator, as a purge for a file fixed
// in place does).
func TestASliceFlightIsNotJoinedAfterAPurge(t *testing.T) {
	const size = 4000
	var version atomic.Int32
	h, _ := handlerProxy(t, func(w http.ResponseWriter, r *http.Request) {
		fill := []byte("on")[version.Load()]
		body := make([]byte, size)
		for i := range body {
			body[i] = fill
		}
		w.Header().Set("Cache-Control", "max-age=600")
		w.Header().Set("ETag", `"same"`)
		w.Header().Set("Content-Type", "application/octet-stream")
		if rg := r.Header.Get("Range"); rg != "" && !strings.HasPrefix(rg, "bytes=0-") {
			time.Sleep(400 * time.Millisecond) // slice 1 is slow
		}
		http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(body))
	}, func(c *Config) { c.SliceBytes = 1024 })
	if w := serve(h, "GET", "/big", "Range", "bytes=0-9"); w.Code != 206 || w.Body.String() != "oooooooooo" {
		t.Fatalf("prime: %d %q", w.Code, w.Body.String())
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		serve(h, "GET", "/big", "Range", "bytes=1024-1033")
	}()
	time.Sleep(100 * time.Millisecond)
	version.Store(1)
	h.Purge(PurgeRequest{URL: "http://example.com/big"})
	w := serve(h, "GET", "/big", "Range", "bytes=1024-1033") // after the purge
	<-done
	t.Logf("after the purge: %d %q %s", w.Code, w.Body.String(), w.Header().Get("Cache-Status"))
	if strings.Contains(w.Body.String(), "o") {
		t.Errorf("a request made after the purge got the purged slice: %q", w.Body.String())
	}
}
