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
	cancel context.CancelFunc
	timer  *time.Timer

	mu        sync.Mutex
	limit     time.Duration
	reading   bool      // a Read is waiting for the sender
	waitStart time.Time // when that Read began
	fired     bool
	// read and waited are the bytes Reads returned and the time they
	// waited for them, in all: how fast the sender sends, whatever the
	// reader's own pace.
	read   int64
	waited time.Duration
}

// IdleBody is a response body with an idle limit that can be changed
// while it is read: the cluster shortens a peer's when it suspects the
// peer, so that a stream still flowing goes on and a silent one ends.
type IdleBody interface {
	io.ReadCloser
	// SetLimit makes limit the longest a Read may wait, counted from the
	// start of a Read already waiting: one that has waited longer ends
	// now (from another goroutine: SetLimit never calls cancel itself, so
	// it may be called under the lock cancel takes).
	SetLimit(limit time.Duration)
	// Progress is the bytes read so far and the time Reads spent waiting
	// for them (a Read under way counts up to now).
	Progress() (read int64, waited time.Duration)
}

// WithIdleTimeout wraps body so that a stall longer than limit cancels the
// request (through cancel) and fails the read.
func WithIdleTimeout(body io.ReadCloser, limit time.Duration, cancel context.CancelFunc) IdleBody {
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
	b.mu.Lock()
	b.reading, b.waitStart = true, time.Now()
	b.timer.Reset(b.limit)
	b.mu.Unlock()
	n, err := b.ReadCloser.Read(p)
	b.mu.Lock()
	b.reading = false
	b.read += int64(n)
	b.waited += time.Since(b.waitStart)
	b.timer.Stop()
	fired := b.fired
	b.mu.Unlock()
	if fired {
		return n, ErrBodyStalled
	}
	return n, err
}

func (b *idleBody) Progress() (int64, time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	waited := b.waited
	if b.reading {
		waited += time.Since(b.waitStart)
	}
	return b.read, waited
}

func (b *idleBody) SetLimit(limit time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.limit = limit
	if b.reading && !b.fired {
		b.timer.Reset(max(0, limit-time.Since(b.waitStart)))
	}
}

func (b *idleBody) Close() error {
	b.timer.Stop()
	err := b.ReadCloser.Close()
	b.cancel()
	return err
}

// ErrSendStalled reports an origin that read none of a request's body for
// longer than the response timeout.
var ErrSendStalled = errors.New("the origin stopped reading the request body")

// sendWatch ends a request whose origin stops reading its body: the clock
// runs while the transport holds a chunk it read (writing it to the
// origin) and stops while it reads the next one, so a slow client's
// upload (which its own body deadline bounds) is not charged to the
// origin. Without it an origin that accepted the connection and read
// nothing held an upload for ever: the response timeout starts only once
// the request is written (a review's
// TestS30OriginHungOriginThatReadsNoUploadHoldsItForever).
type sendWatch struct {
	io.ReadCloser
	limit    time.Duration
	timer    *time.Timer
	mu       sync.Mutex
	fired    bool
	answered bool // the origin's answer came: the watch is done
}

func newSendWatch(body io.ReadCloser, limit time.Duration, cancel context.CancelFunc) *sendWatch {
	w := &sendWatch{ReadCloser: body, limit: limit}
	w.timer = time.AfterFunc(limit, func() {
		w.mu.Lock()
		fire := !w.answered
		w.fired = fire
		w.mu.Unlock()
		if fire {
			cancel()
		}
	})
	w.timer.Stop() // started when a chunk is handed to the transport
	return w
}

func (w *sendWatch) Read(p []byte) (int, error) {
	w.timer.Stop()
	n, err := w.ReadCloser.Read(p)
	w.mu.Lock()
	if err == nil && n > 0 && !w.answered {
		w.timer.Reset(w.limit)
	}
	w.mu.Unlock()
	return n, err
}

// answer ends the watch once the origin has answered: an origin may
// answer before it reads an upload it will not use, and the transport
// may go on writing it meanwhile; the answer's own body has its own idle
// limit (WithIdleTimeout). Cancelling here cut such an answer short (a
// review's TestS31OriginEarlyAnswerIsCutByTheSendWatch).
func (w *sendWatch) answer() {
	w.mu.Lock()
	w.answered = true
	w.mu.Unlock()
	w.timer.Stop()
}

func (w *sendWatch) Close() error {
	w.timer.Stop()
	return w.ReadCloser.Close()
}

// stalled reports whether the watch ended the request.
func (w *sendWatch) stalled() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.fired
}
