package proxy

import (
	"sync/atomic"
	"testing"
	"time"
)

// TestAStalePurgeCountDoesNotSplitAFlight (a hostile review's): flight F1
// starts after a purge (count 1). A caller that read the count before the
// purge (0: slice() loads h.purges before do takes the lock) found F1
// "from another purge" and replaced it in the map with a flight of its
// own; the next post-purge caller then found that one mismatched too and
// started a third fetch. A flight newer than the caller's count is after
// the purge as well: both now share F1.
func TestAStalePurgeCountDoesNotSplitAFlight(t *testing.T) {
	var g flights
	var runs atomic.Int32
	release := make(chan struct{})
	fn := func() (any, error) { runs.Add(1); <-release; return "v", nil }
	go g.do("k", fillWait{}, 1, fn) // F1, after the purge
	for runs.Load() < 1 {
		time.Sleep(time.Millisecond)
	}
	done := make(chan bool, 2)
	for _, purges := range []uint64{0, 1} { // read just before the purge; after it
		go func() { _, shared, _, _ := g.do("k", fillWait{}, purges, fn); done <- shared }()
	}
	for waiting := 0; waiting < 2; time.Sleep(time.Millisecond) {
		g.mu.Lock()
		waiting = g.m["k"].waiters
		g.mu.Unlock()
	}
	close(release)
	for range 2 {
		if !<-done {
			t.Error("a caller did not share the post-purge flight")
		}
	}
	if n := runs.Load(); n != 1 {
		t.Errorf("%d fetches, want the post-purge flight's one", n)
	}
}
