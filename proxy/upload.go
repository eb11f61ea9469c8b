package proxy

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"sync/atomic"
)

// Request buffering. A request body of known length is read before an
// upstream slot is taken, as nginx's proxy_request_buffering does: a
// client that uploads slowly then holds its own goroutine and buffer, not
// one of the limits.max_inflight slots, which enough slow uploads filled
// before (each for up to limits.body_timeout + its size at
// limits.min_body_rate), turning every miss into a 503. A body up to
// uploadMemory is held in memory, charged to the buffer budget; a larger
// one goes to a spill file (limits.spool_dir, within limits.spool_bytes and
// one spill's share).
//
// A body of unknown length (chunked HTTP/1.1, an HTTP/2 or HTTP/3 stream
// without a length) streams as before: that is how clients stream requests
// (gRPC, an upload sent as it is made, a request the server answers while
// it is sent), which reading it whole would break. So does a body the
// budget or the spool cannot take whole: what was read goes first, the
// rest from the client. limits.request_buffering false (Config.
// RequestBuffering) streams every body, for origins that must see an
// upload as it comes (progress bars, reading a stream as it is made).

// uploadMemory is the largest request body held in memory: a form or an
// API call's JSON; larger ones go to the spool.
const uploadMemory = 64 << 10

// How a request body reached the upstream (edge_request_bodies_total).
const (
	bodyInMemory = "memory"   // read whole into memory first
	bodyOnDisk   = "disk"     // read whole into a spill file first
	bodyStreamed = "streamed" // sent as it came, holding the slot
)

// bufferedBody is a request body read ahead of the upstream request: the
// bytes read (rd), then whatever of the client's body (orig) is left.
type bufferedBody struct {
	rd   io.Reader
	orig io.ReadCloser
}

func (b *bufferedBody) Read(p []byte) (int, error) { return b.rd.Read(p) }

// Close closes the client's body; the spill, if any, is closed when the
// request ends (done), since the transport may close the body it was
// given before it has finished with it.
func (b *bufferedBody) Close() error { return b.orig.Close() }

// bufferBody reads r's body ahead of the upstream request when its length
// is known (see above), replacing r.Body. done releases what it holds; call
// it when the request has ended. An error is the client's body failing
// (too slow, cut short): the caller answers it.
func (h *Handler) bufferBody(r *http.Request) (done func(), err error) {
	n := r.ContentLength
	if n == 0 || r.Body == nil || r.Body == http.NoBody || r.Method == http.MethodGet || r.Method == http.MethodHead {
		return func() {}, nil // nothing to send (a GET's body is never sent: outboundRequest)
	}
	if n < 0 || !h.cfg.RequestBuffering {
		h.metrics.requestBodies[bodyStreamed].Inc()
		return func() {}, nil
	}
	if n <= uploadMemory && share(&h.uploadMem, n, h.cfg.MaxBufferedBytes/4) {
		if h.charge(n) {
			done := func() { h.release(n); h.uploadMem.Add(-n) }
			buf := make([]byte, n)
			if _, err := io.ReadFull(r.Body, buf); err != nil {
				done()
				return nil, err
			}
			if r.ProtoMajor == 1 {
				readEOF(r.Body)
			}
			r.Body = &bufferedBody{rd: bytes.NewReader(buf), orig: r.Body}
			h.metrics.requestBodies[bodyInMemory].Inc()
			return done, nil
		}
		h.uploadMem.Add(-n) // no room in the budget itself: try the spool
	}
	if h.spool == nil || n > h.spool.perFile || !share(&h.uploadDisk, n, h.spool.budget/2) {
		h.metrics.requestBodies[bodyStreamed].Inc()
		return func() {}, nil
	}
	sp, err := h.spool.open(0)
	if err != nil {
		h.uploadDisk.Add(-n)
		h.metrics.requestBodies[bodyStreamed].Inc()
		return func() {}, nil
	}
	done = func() { sp.close(); h.uploadDisk.Add(-n) }
	chunk := make([]byte, 32<<10)
	var readErr error
	for sp.size < n {
		k, err := r.Body.Read(chunk[:min(int64(len(chunk)), n-sp.size)])
		if k > 0 && sp.append(chunk[:k]) != nil {
			// The spool cannot take the rest: what it holds goes
			// first, then the chunk, then the client's body as it comes.
			r.Body = &bufferedBody{rd: io.MultiReader(io.NewSectionReader(spillReaderAt{sp}, 0, sp.size), bytes.NewReader(chunk[:k]), r.Body), orig: r.Body}
			h.metrics.requestBodies[bodyStreamed].Inc()
			return done, nil
		}
		if err != nil {
			readErr = err
			break
		}
	}
	if sp.size < n {
		done()
		if errors.Is(readErr, io.EOF) {
			readErr = io.ErrUnexpectedEOF
		}
		return nil, readErr
	}
	if r.ProtoMajor == 1 {
		readEOF(r.Body) // HTTP/2 and 3 end the stream when they will: not waited for
	}
	r.Body = &bufferedBody{rd: io.NewSectionReader(spillReaderAt{sp}, 0, n), orig: r.Body}
	h.metrics.requestBodies[bodyOnDisk].Inc()
	return done, nil
}

// readEOF reads the end of a body whose declared length has been read,
// so that it counts as read to its end (dropUnreadBody then leaves the
// connection open).
func readEOF(body io.Reader) {
	var one [1]byte
	_, _ = body.Read(one[:])
}

// spillReaderAt reads a spill from its first byte.
type spillReaderAt struct{ sp *spill }

func (s spillReaderAt) ReadAt(p []byte, off int64) (int, error) {
	if off >= s.sp.size {
		return 0, io.EOF
	}
	return s.sp.readAt(p[:min(int64(len(p)), s.sp.size-off)], off+s.sp.base)
}

// clientBody is the client's own body under a buffered one.
func clientBody(body io.ReadCloser) io.ReadCloser {
	if b, ok := body.(*bufferedBody); ok {
		return b.orig
	}
	return body
}

// share takes n of a share of at most limit held in c, or reports false
// (the buffer budget itself is one: charge).
func share(c *atomic.Int64, n, limit int64) bool {
	if c.Add(n) > limit {
		c.Add(-n)
		return false
	}
	return true
}
