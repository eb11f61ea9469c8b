package proxy

import (
	"context"
	"sync"
	"time"
)

// coalescer merges concurrent fetches of the same key: the first caller (the
// leader) fetches, later callers wait for its result. Unlike singleflight,
// a waiter gives up after a timeout, and a result may be marked not
// shareable (a response that may not be stored must not be handed to other
// clients), in which case waiters fetch for themselves.
type coalescer struct {
	mu      sync.Mutex
	flights map[string]*flight
}

type flight struct {
	done    chan struct{}
	entry   *Entry // the shared result; nil if not shareable
	waiters int
}

func newCoalescer() *coalescer { return &coalescer{flights: make(map[string]*flight)} }

// join returns (f, true) if the caller became the leader for key, who must
// call finish; otherwise it returns the leader's flight to wait on.
func (c *coalescer) join(key string) (*flight, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if f, ok := c.flights[key]; ok {
		f.waiters++
		return f, false
	}
	f := &flight{done: make(chan struct{})}
	c.flights[key] = f
	return f, true
}

// lead makes the caller the leader for key if no fetch is under way; it
// never waits.
func (c *coalescer) lead(key string) (*flight, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.flights[key]; ok {
		return nil, false
	}
	f := &flight{done: make(chan struct{})}
	c.flights[key] = f
	return f, true
}

// finish publishes the leader's result (nil if not shareable) and wakes the
// waiters. It returns how many waiters were merged into this flight.
func (c *coalescer) finish(key string, f *flight, e *Entry) int {
	c.mu.Lock()
	delete(c.flights, key)
	n := f.waiters
	c.mu.Unlock()
	f.entry = e
	close(f.done)
	return n
}

// wait blocks until the leader finishes, the timeout passes or ctx ends. It
// returns the shared entry, or nil when the caller must fetch for itself.
func (f *flight) wait(ctx context.Context, timeout time.Duration) *Entry {
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-f.done:
		return f.entry
	case <-t.C:
		return nil
	case <-ctx.Done():
		return nil
	}
}
