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

// idleBody ends a response body whose sender stops sending: if a Read
// waits longer than limit, it cancels the request's context (which
// unblocks the Read) and reports ErrBodyStalled. Without it a peer or
// origin that stalls after its headers would hold a client forever. The
// clock runs only while a Read is outstanding: a reader that pauses on
// purpose (a shared fill waiting for its slowest client) is not the
// sender's fault.
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
	b.timer.Stop() // started by each Read
	return b
}

func (b *idleBody) fire() {
	b.mu.Lock()
	b.fired = true
	b.mu.Unlock()
	b.cancel()
}

func (b *idleBody) Read(p []byte) (int, error) {
	b.timer.Reset(b.limit)
	n, err := b.ReadCloser.Read(p)
	b.timer.Stop()
	b.mu.Lock()
	fired := b.fired
	b.mu.Unlock()
	if fired {
		return n, ErrBodyStalled
	}
	return n, err
}

func (b *idleBody) Close() error {
	b.timer.Stop()
	err := b.ReadCloser.Close()
	b.cancel()
	return err
}
