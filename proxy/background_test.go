package proxy

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"
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

// A stream of overlapping tasks never lets the count reach zero (peer
// climbs keep starting pumps); shutdown's deadline must still hold.
func TestBackgroundWaitContextHoldsDeadline(t *testing.T) {
	var b background
	stop := make(chan struct{})
	var chain func()
	chain = func() {
		select {
		case <-stop:
			return
		default:
		}
		b.Go(chain) // the next task starts before this one ends
		time.Sleep(time.Millisecond)
	}
	b.Go(chain)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if err := b.WaitContext(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("WaitContext = %v, want the deadline's error", err)
	}
	close(stop)
	if err := b.WaitContext(context.Background()); err != nil {
		t.Fatalf("WaitContext after the tasks stopped = %v", err)
	}
}
