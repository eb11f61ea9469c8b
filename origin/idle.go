package origin

import (
	"context"
	"errors"
	"io"
	"sync"
	"time"
)

// ErrBodyStalled is returned by a response body that sent nothing for
// longer than its idle limit.
var ErrBodyStalled = errors.New("response body stalled")

// idleBody ends a response body whose sender stops sending: if no Read
// makes progress within limit, it cancels the request's context (which
// unblocks the pending Read) and reports ErrBodyStalled. Without it a peer
// or origin that stalls after its headers would hold a client forever.
type idleBody struct {
	io.ReadCloser
	limit  time.Duration
	cancel context.CancelFunc
	mu     sync.Mutex
	timer  *time.Timer
	fired  bool
}

// WithIdleTimeout wraps body so that a stall longer than limit cancels the
// request (through cancel) and fails the read.
func WithIdleTimeout(body io.ReadCloser, limit time.Duration, cancel context.CancelFunc) io.ReadCloser {
	b := &idleBody{ReadCloser: body, limit: limit, cancel: cancel}
	b.timer = time.AfterFunc(limit, b.fire)
	return b
}

func (b *idleBody) fire() {
	b.mu.Lock()
	b.fired = true
	b.mu.Unlock()
	b.cancel()
}

func (b *idleBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.mu.Lock()
	fired := b.fired
	b.mu.Unlock()
	if fired {
		return n, ErrBodyStalled
	}
	b.timer.Reset(b.limit)
	return n, err
}

func (b *idleBody) Close() error {
	b.timer.Stop()
	err := b.ReadCloser.Close()
	b.cancel()
	return err
}
