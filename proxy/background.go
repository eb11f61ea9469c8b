package proxy

import (
	"context"
	"sync"
)

// background counts the goroutines a handler leaves running after a
// response (body pumps, stale-while-revalidate refreshes) so that shutdown
// and tests can wait for them.
//
// It is not a sync.WaitGroup because tasks start while someone waits: a
// peer climb still running when the peer listener's shutdown deadline
// passed may start a pump, and tests serve requests while waiting. A
// WaitGroup forbids an Add from zero concurrent with Wait (the race detector
// reports it); a counter under a mutex does not.
type background struct {
	mu      sync.Mutex
	running int
	idle    sync.Cond // signalled when running drops to 0
}

// Go runs task in a new goroutine counted until it returns.
func (b *background) Go(task func()) {
	b.mu.Lock()
	b.running++
	b.mu.Unlock()
	go func() {
		defer b.done()
		task()
	}()
}

func (b *background) done() {
	b.mu.Lock()
	b.running--
	if b.running == 0 && b.idle.L != nil {
		b.idle.Broadcast()
	}
	b.mu.Unlock()
}

// Wait blocks until no task is running. Tasks started meanwhile are waited
// for too.
func (b *background) Wait() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.idle.L == nil {
		b.idle.L = &b.mu
	}
	for b.running > 0 {
		b.idle.Wait()
	}
}

// WaitContext is Wait bounded by ctx: it returns ctx's error if tasks are
// still running when ctx ends (a shutdown deadline must hold even while
// slow streams keep pumping). The goroutine waiting on their behalf ends
// with the last task.
func (b *background) WaitContext(ctx context.Context) error {
	idle := make(chan struct{})
	go func() {
		b.Wait()
		close(idle)
	}()
	select {
	case <-idle:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
