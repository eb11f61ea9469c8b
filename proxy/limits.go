package proxy

import (
	"errors"
	"io"
	"net"
	"net/http"
	"sync/atomic"
	"time"
)

// Guards against hostile clients. Memory: the store holds at most its
// budget; fills in progress and stored responses evicted while still being
// written hold at most MaxBufferedBytes between them (a fill that cannot
// get budget streams to its readers through a small window and is not
// stored); every other response streams through one 32 KiB buffer. Time: a
// request body must start within BodyTimeout and then average MinBodyRate,
// and a client must accept a 32 KiB chunk within WriteTimeout, so neither
// a slow sender nor a slow reader holds a connection for long.

// slowBody enforces the minimum request body rate with read deadlines: by
// the time n bytes have arrived, at most BodyTimeout + n/MinBodyRate may
// have passed.
type slowBody struct {
	io.ReadCloser
	rc       *http.ResponseController
	start    time.Time
	grace    time.Duration
	rate     int64
	n        int64
	timedOut atomic.Bool
	eof      atomic.Bool
	dropped  atomic.Bool // the handler gave up on the rest of the body
}

// guardBody wraps a request body with the size limit and the rate limit.
func (h *Handler) guardBody(w http.ResponseWriter, body io.ReadCloser) io.ReadCloser {
	body = http.MaxBytesReader(w, body, h.cfg.MaxBodyBytes)
	if h.cfg.BodyTimeout <= 0 {
		return body
	}
	return &slowBody{ReadCloser: body, rc: http.NewResponseController(w), start: time.Now(), grace: h.cfg.BodyTimeout, rate: max(h.cfg.MinBodyRate, 1)}
}

func (b *slowBody) Read(p []byte) (int, error) {
	if b.dropped.Load() {
		return 0, errBodyDropped
	}
	if b.eof.Load() {
		return 0, io.EOF // its deadline is cleared for good (below): not set again
	}
	allowed := b.grace + time.Duration(float64(b.n)/float64(b.rate)*float64(time.Second))
	_ = b.rc.SetReadDeadline(b.start.Add(allowed))
	n, err := b.ReadCloser.Read(p)
	b.n += int64(n)
	if errors.Is(err, io.EOF) {
		// The body is in: its deadline must not end net/http's background
		// read of the connection (which cancels the request) while the
		// origin takes its time (a review's
		// TestAnUploadToASlowOriginIsNotCutByItsBodyDeadline). Cleared
		// before eof is seen, so that nothing after sets it again.
		_ = b.rc.SetReadDeadline(time.Time{})
		b.eof.Store(true)
	}
	var ne net.Error
	if err != nil && errors.As(err, &ne) && ne.Timeout() {
		b.timedOut.Store(true)
	}
	return n, err
}

var errBodyDropped = errors.New("proxy: request body no longer read")

// dropUnreadBody handles a request whose body will not be read to its end
// (the origin answered early, or a GET with a body). net/http would read
// up to 256 KiB of it before sending the response, at the pace of a client
// that may be trickling it; instead the edge stops reading now (a read
// deadline in the past) and closes the connection after the response:
// closeIfDropped, which serve hooks on every HTTP/1.x request with such a
// body, says Connection: close (HTTP/2 and HTTP/3 end the stream, not the
// connection; a Connection field is malformed there: RFC 9113 §8.2.2,
// RFC 9114 §4.2).
func dropUnreadBody(r *http.Request) {
	sb, ok := clientBody(r.Body).(*slowBody)
	if !ok || sb.eof.Load() {
		return
	}
	sb.dropped.Store(true)
	_ = sb.rc.SetReadDeadline(time.Now())
}

// closeIfDropped puts Connection: close on the answer to an HTTP/1.x
// request whose body the edge stopped reading (dropUnreadBody), as the
// header is written (a headerHook). It is the one place that says so: the
// field dropUnreadBody used to set did not survive the answer's header
// being built after it (stream copies the origin's fields and removes
// hop-by-hop ones, an error clears them), so the connection was kept
// while the body's past read deadline stood. net/http then either gave up
// discarding the rest and parsed it as the next request (a review's
// TestS36PipelinedUploadAnsweredEarlyIsParsedAsRequests: requests written
// into a body reached the origin), or failed its background read and
// cancelled the client's next request (502 client-gone:
// TestS36NodeEarlyAnswerToUpload).
func closeIfDropped(body *slowBody) func(h http.Header, code int) {
	return func(h http.Header, _ int) {
		if body.dropped.Load() {
			h.Set("Connection", "close")
		}
	}
}

// headerHook is a ResponseWriter that calls hook on the answer's header
// as its final status is written (not a 1xx's, which does not end the
// request): the one place every answer ServeHTTP writes passes.
type headerHook struct {
	http.ResponseWriter
	hook  func(h http.Header, code int)
	wrote bool
}

func (c *headerHook) WriteHeader(code int) {
	if !c.wrote && code >= 200 {
		c.wrote = true
		c.hook(c.Header(), code)
	}
	c.ResponseWriter.WriteHeader(code)
}

func (c *headerHook) Write(p []byte) (int, error) {
	if !c.wrote {
		c.WriteHeader(http.StatusOK)
	}
	return c.ResponseWriter.Write(p)
}

// Unwrap lets http.ResponseController reach the connection's writer
// (deadlines, flushes), and the Early Hints relay its 1xx writer.
func (c *headerHook) Unwrap() http.ResponseWriter { return c.ResponseWriter }

// bodyTimedOut reports whether a request body failed its rate limit.
func bodyTimedOut(body io.ReadCloser) bool {
	sb, ok := clientBody(body).(*slowBody)
	return ok && sb.timedOut.Load()
}

// charge takes n bytes of the buffer budget, or reports false.
func (h *Handler) charge(n int64) bool { return share(&h.buffered, n, h.cfg.MaxBufferedBytes) }

// force takes n bytes of the buffer budget even beyond it (a trimming
// fill's window: bounded per fill, and accounted so that new fills see it).
func (h *Handler) force(n int64) { h.buffered.Add(n) }

// Charge and Release let a fetcher hold response bytes under the same
// budget (the cluster's read-ahead of peer answers).
func (h *Handler) Charge(n int64) bool { return h.charge(n) }

// Release gives back what Charge took.
func (h *Handler) Release(n int64) { h.release(n) }

// release gives n bytes back to the buffer budget.
func (h *Handler) release(n int64) {
	if n != 0 {
		h.buffered.Add(-n)
	}
}

// pinDropped runs when the store lets go of e: if responses are still
// being written from it, its bytes stay in memory, so they are charged to
// the buffer budget until the last writer is done (unpin). New fills then
// find less budget, which is what keeps memory bounded under slow readers.
func (h *Handler) pinDropped(e *Entry) {
	// The entry and its forms: a writer may be sending any of them. The
	// amount is set before the pin is taken, so that an unpin racing with
	// us gives back exactly what was charged. (An entry leaves the store
	// once, so this runs once per entry.)
	n := e.size + e.formBytes.Load()
	e.pinBytes.Store(n)
	e.dropped.Store(true)
	if e.users.Load() > 0 && e.pinned.CompareAndSwap(false, true) {
		h.buffered.Add(n)
		if e.users.Load() == 0 && e.pinned.CompareAndSwap(true, false) {
			h.buffered.Add(-n)
		}
	}
}

// unpin ends one writer's use of e.
func (h *Handler) unpin(e *Entry) {
	if e.users.Add(-1) == 0 && e.dropped.Load() && e.pinned.CompareAndSwap(true, false) {
		h.buffered.Add(-e.pinBytes.Load())
	}
}
