package proxy

import (
	"sync/atomic"
	"testing"
)

// Tasks started while Wait is blocked are legal (shutdown does this: peer
// climbs keep starting pumps) and are waited for.
func TestBackgroundStartsWhileWaiting(t *testing.T) {
	var b background
	var finished atomic.Int32
	release := make(chan struct{})
	b.Go(func() { <-release; finished.Add(1) })
	waited := make(chan struct{})
	go func() { b.Wait(); close(waited) }()
	for range 50 {
		b.Go(func() { finished.Add(1) })
	}
	b.Go(func() { <-release; finished.Add(1) })
	select {
	case <-waited:
		t.Fatal("Wait returned while tasks were running")
	default:
	}
	close(release)
	<-waited
	b.Wait()
	if got := finished.Load(); got != 52 {
		t.Fatalf("finished = %d, want 52", got)
	}
}
