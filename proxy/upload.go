package proxy

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"sync/atomic"
)

// Request buffering. A request body is read before an upstream slot is
// taken, as nginx's proxy_request_buffering does: a client that uploads
// slowly then holds its own goroutine and buffer, not one of the
// limits.max_inflight slots, which enough slow uploads filled before (each
// for up to limits.body_timeout + its size at limits.min_body_rate),
// turning every miss into a 503. A body up to uploadMemory is held in
// memory, charged to the buffer budget; a larger one goes to a spill file
// (limits.spool_dir, within limits.spool_bytes and one spill's share).
//
// A body of unknown length (chunked HTTP/1.1, an HTTP/2 or HTTP/3 stream
// without a length) is read the same way, its spill's share taken as it
// grows, and goes to the origin with the length it turned out to have.
// Until 2026-12-05 it streamed, holding its slot: any client could hold
// every slot by declaring no length, which undid the rest. A body the
// budget or the spool cannot take whole goes on as it comes: what was read
// first, then the rest from the client, holding its slot.
// limits.request_buffering false (Config.RequestBuffering) streams every
// body, for origins that must see an upload as it comes (progress bars, a
// stream read as it is made). Either way the edge stops reading a request
// body once the origin has answered (dropUnreadBody): a request the origin
// answers while it is still being sent (full duplex: gRPC's bidirectional
// streams) is not carried.

// uploadMemory is the largest request body held in memory: a form or an
// API call's JSON; larger ones go to the spool.
const uploadMemory = 64 << 10

// uploadDiskStep is how much of its spool share a body of unknown length
// takes at a time as it grows.
const uploadDiskStep = 1 << 20

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

// bufferBody reads r's body ahead of the upstream request (see above),
// replacing r.Body. done releases what it holds; call it when the request
// has ended. An error is the client's body failing (too slow, cut short,
// over limits.max_body_bytes: *http.MaxBytesError): the caller answers it.
func (h *Handler) bufferBody(r *http.Request) (done func(), err error) {
	n := r.ContentLength
	if n == 0 || r.Body == nil || r.Body == http.NoBody || r.Method == http.MethodGet || r.Method == http.MethodHead {
		return func() {}, nil // nothing to send (a GET's body is never sent: outboundRequest)
	}
	if !h.cfg.RequestBuffering {
		h.metrics.requestBodies[bodyStreamed].Inc()
		return func() {}, nil
	}
	if n < 0 {
		return h.bufferUnknown(r)
	}
	if n <= uploadMemory && share(&h.uploadMem, n, h.cfg.MaxBufferedBytes/4) {
		if h.charge(n) {
			done := func() { h.release(n); h.uploadMem.Add(-n) }
			buf := make([]byte, n)
			// Not io.ReadFull: it drops an error that comes with the last
			// bytes, and HTTP/3's body gives the declared length with the
			// error of a stream that sent more than it declared (RFC 9114
			// §4.1.2: malformed, never to be forwarded; a review's).
			got, err := readUpTo(r.Body, buf)
			if err := fullBody(len(buf), got, err); err != nil {
				done()
				return nil, err
			}
			if r.ProtoMajor == 1 {
				readEOF(r.Body)
			}
			r.Body = &bufferedBody{rd: bytes.NewReader(buf), orig: r.Body}
			dropExpect(r)
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
	pending, err := spillBody(r.Body, sp, n, nil)
	switch {
	case pending != nil:
		h.streamRest(r, sp, pending)
		return done, nil
	case err != nil:
		done()
		return nil, err
	}
	if r.ProtoMajor == 1 {
		readEOF(r.Body) // HTTP/2 and 3 end the stream when they will: not waited for
	}
	r.Body = &bufferedBody{rd: io.NewSectionReader(spillReaderAt{sp}, 0, n), orig: r.Body}
	dropExpect(r)
	h.metrics.requestBodies[bodyOnDisk].Inc()
	return done, nil
}

// bufferUnknown reads a body of unknown length ahead of the upstream
// request: into memory up to uploadMemory (charged to the buffer budget),
// past that into a spill whose share it takes uploadDiskStep at a time.
// Once whole it goes with a Content-Length in place of the chunked coding.
func (h *Handler) bufferUnknown(r *http.Request) (done func(), err error) {
	var held int64 // memory charged
	if share(&h.uploadMem, uploadMemory, h.cfg.MaxBufferedBytes/4) {
		if h.charge(uploadMemory) {
			held = uploadMemory
		} else {
			h.uploadMem.Add(-uploadMemory)
		}
	}
	keepMem := func(k int64) { // hold k of what was charged
		h.release(held - k)
		h.uploadMem.Add(-(held - k))
		held = k
	}
	var buf []byte
	if held > 0 {
		buf = make([]byte, uploadMemory)
		k, err := readUpTo(r.Body, buf)
		switch {
		case errors.Is(err, io.EOF):
			// A copy of its own size, made while the whole read buffer is
			// still charged, then the charge cut to it: the buffer's
			// 64 KiB would otherwise be held to the request's end, charged
			// k (a review's TestReviewChunkedSmallBodyHoldsOnlyWhatItIsCharged).
			body := bytes.Clone(buf[:k])
			keepMem(int64(k))
			r.Body = &bufferedBody{rd: bytes.NewReader(body), orig: r.Body}
			setLength(r, int64(k))
			h.metrics.requestBodies[bodyInMemory].Inc()
			return func() { keepMem(0) }, nil
		case err != nil:
			keepMem(0)
			return nil, err
		}
		buf = buf[:k] // full: more may follow
	}
	if h.spool == nil {
		return h.streamFrom(r, buf, keepMem), nil
	}
	sp, err := h.spool.open(0)
	if err != nil {
		return h.streamFrom(r, buf, keepMem), nil
	}
	var disk int64 // spool share taken
	room := func(size int64) bool {
		for disk < size {
			step := min(uploadDiskStep, h.spool.perFile-disk)
			if step <= 0 || !share(&h.uploadDisk, step, h.spool.budget/2) {
				return false
			}
			disk += step
		}
		return true
	}
	done = func() { sp.close(); h.uploadDisk.Add(-disk) }
	if len(buf) > 0 {
		if !room(int64(len(buf))) || sp.append(buf) != nil {
			done()
			return h.streamFrom(r, buf, keepMem), nil
		}
		keepMem(0) // in the spill now
	}
	pending, err := spillBody(r.Body, sp, -1, room)
	switch {
	case pending != nil:
		h.streamRest(r, sp, pending)
		return done, nil
	case err != nil:
		done()
		return nil, err
	}
	r.Body = &bufferedBody{rd: io.NewSectionReader(spillReaderAt{sp}, 0, sp.size), orig: r.Body}
	setLength(r, sp.size)
	h.metrics.requestBodies[bodyOnDisk].Inc()
	return done, nil
}

// spillBody reads body into sp until it holds want bytes (want < 0: until
// the body ends), asking room, if given, before each append. It returns
// the chunk read that sp could not take (room refused, or the spool is
// full: the caller sends sp, then it, then the rest of the body as it
// comes), or the body's error: io.ErrUnexpectedEOF for a body that ends
// short of want.
func spillBody(body io.Reader, sp *spill, want int64, room func(int64) bool) (pending []byte, err error) {
	chunk := make([]byte, 32<<10)
	for want < 0 || sp.size < want {
		limit := int64(len(chunk))
		if want >= 0 {
			limit = min(limit, want-sp.size)
		}
		k, err := body.Read(chunk[:limit])
		if k > 0 && ((room != nil && !room(sp.size+int64(k))) || sp.append(chunk[:k]) != nil) {
			return chunk[:k], nil
		}
		switch {
		case err == nil:
		case errors.Is(err, io.EOF) && (want < 0 || sp.size == want):
			return nil, nil // a reader may give its last bytes with io.EOF
		case errors.Is(err, io.EOF):
			return nil, io.ErrUnexpectedEOF
		default:
			return nil, err
		}
	}
	return nil, nil
}

// streamRest sends what sp holds, then pending, then the rest of r's body
// as the client sends it: a body the spool could not take whole.
func (h *Handler) streamRest(r *http.Request, sp *spill, pending []byte) {
	dropExpect(r)
	r.Body = &bufferedBody{rd: io.MultiReader(io.NewSectionReader(spillReaderAt{sp}, 0, sp.size), bytes.NewReader(pending), r.Body), orig: r.Body}
	h.metrics.requestBodies[bodyStreamed].Inc()
}

// streamFrom sends buf, then the rest of r's body as the client sends it,
// and returns what releases buf (keepMem(0)).
func (h *Handler) streamFrom(r *http.Request, buf []byte, keepMem func(int64)) (done func()) {
	if len(buf) > 0 {
		r.Body = &bufferedBody{rd: io.MultiReader(bytes.NewReader(buf), r.Body), orig: r.Body}
		dropExpect(r)
	}
	h.metrics.requestBodies[bodyStreamed].Inc()
	return func() { keepMem(0) }
}

// fullBody judges readUpTo's (n, err) for a body that must fill a buffer
// of want bytes exactly: nil when it did (with io.EOF or not: net/http's
// body ends with an io.EOF beside the last bytes), io.ErrUnexpectedEOF
// when it ended short, and any other error as it is, even one that came
// with the last bytes.
func fullBody(want, n int, err error) error {
	switch {
	case err == nil || (errors.Is(err, io.EOF) && n == want):
		return nil
	case errors.Is(err, io.EOF):
		return io.ErrUnexpectedEOF
	}
	return err
}

// readUpTo reads into buf until it is full or the body ends or fails
// (io.EOF: it ended, with n bytes).
func readUpTo(body io.Reader, buf []byte) (n int, err error) {
	for n < len(buf) {
		k, err := body.Read(buf[n:])
		n += k
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// dropExpect drops r's Expect: 100-continue once this server has read
// some of its body (all of it, or what went ahead of a body that goes on
// as it comes): the client had its 100 Continue then, and the origin asked
// to send one would be waited for (a second on every upload to an origin
// that sends none: a review's TestReviewBufferedUploadDoesNotForwardExpect).
func dropExpect(r *http.Request) {
	delete(r.Header, "Expect")
}

// setLength makes r, whose body was read whole, go upstream with its
// length rather than the chunked coding it came in.
func setLength(r *http.Request, n int64) {
	dropExpect(r)
	r.ContentLength = n
	r.TransferEncoding = nil
	if n == 0 {
		r.Body = http.NoBody // a known empty body: net/http sends Content-Length: 0
	}
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
