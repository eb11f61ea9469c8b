package h2server

import (
	"net/http"
	"os"
	"runtime"
	"runtime/pprof"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
)

// Withstood: a zero-window stall. A client with SETTINGS_INITIAL_WINDOW_SIZE
// 0 opens the stream limit's worth of 1 MiB hits and never sends
// WINDOW_UPDATE (it reads its socket, so writes never block). Each hit
// waits in a goroutine for at most WriteTimeout per chunk, then is reset;
// the goroutines go back, and a second wave is held to the stream limit.
func TestS32DosZeroWindowHitsAreReleased(t *testing.T) {
	var hits atomic.Int64
	srv := &Server{Handler: http.NotFoundHandler(), WriteTimeout: time.Second,
		Hits: answerer{body: make([]byte, 1<<20), n: &hits}, Fields: hitpathFields()}
	addr := rvServer(t, srv)
	before := runtime.NumGoroutine()
	c := rvDial(t, addr, http2.Setting{ID: http2.SettingInitialWindowSize, Val: 0})
	var cancels atomic.Int64
	go func() {
		for f := range c.frames {
			if r, ok := f.(*http2.RSTStreamFrame); ok && r.ErrCode == http2.ErrCodeCancel {
				cancels.Add(1)
			}
		}
	}()
	waitGoroutines := func(what string) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for runtime.NumGoroutine() > before+20 {
			if time.Now().After(deadline) {
				_ = pprof.Lookup("goroutine").WriteTo(os.Stderr, 1)
				t.Fatalf("%s: %d goroutines 20 s after the write timeout (1 s), %d before", what, runtime.NumGoroutine(), before)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	id := uint32(1)
	for wave := range 2 {
		for range 2 * DefaultMaxConcurrentStreams {
			c.headers(id, true, rvGet("/hit")...)
			id += 2
		}
		time.Sleep(200 * time.Millisecond)
		if g := runtime.NumGoroutine(); g > before+DefaultMaxConcurrentStreams+50 {
			t.Errorf("wave %d: %d goroutines for a connection of %d streams (%d before)", wave, g, DefaultMaxConcurrentStreams, before)
		}
		waitGoroutines("wave")
	}
	if got := hits.Load(); got > 2*DefaultMaxConcurrentStreams {
		t.Errorf("%d hits taken in two waves of a %d-stream connection that never opened its window", got, DefaultMaxConcurrentStreams)
	}
	t.Logf("hits %d, streams reset CANCEL %d", hits.Load(), cancels.Load())
}
