package h2server

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/net/http/httpguts"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// stream is one request and its response.
type stream struct {
	c        *conn
	id       uint32
	declared int64 // the request's content-length (-1: none)
	received int64 // body bytes received (loop only)
	body     *pipe // nil: no body
	ctx      context.Context
	cancel   context.CancelFunc

	// Under c.mu.
	sendWindow  int64
	recvWindow  int64
	recvUnacked int64
	remoteDone  bool // END_STREAM or RST_STREAM received
	localDone   bool // END_STREAM or RST_STREAM sent
	reset       bool // reset by either side: writes fail

	writesClosed bool // under c.wmu: RST_STREAM sent or received, no frame may follow
}

// resetLocked marks the stream reset and wakes whoever waits on it; c.mu
// is held.
func (st *stream) resetLocked(err error) {
	if st.reset {
		return
	}
	st.reset = true
	if st.cancel != nil {
		st.cancel()
	}
	if st.body != nil {
		st.body.closeWithError(err, nil)
	}
	st.c.cond.Broadcast()
}

// endLocal records that the response's END_STREAM was sent.
func (st *stream) endLocal() {
	c := st.c
	c.mu.Lock()
	st.localDone = true
	if st.remoteDone {
		c.removeLocked(st)
	}
	c.mu.Unlock()
}

// endRemote records that the request's END_STREAM arrived.
func (st *stream) endRemote() {
	c := st.c
	c.mu.Lock()
	st.remoteDone = true
	if st.localDone {
		c.removeLocked(st)
	}
	c.mu.Unlock()
}

// reserve takes up to n bytes of send window (at most one frame), waiting
// for WINDOW_UPDATE until deadline (zero: none). gen is the settings
// generation the reservation was made under.
func (st *stream) reserve(n int, deadline time.Time) (k int, gen uint64, err error) {
	c := st.c
	c.mu.Lock()
	defer c.mu.Unlock()
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		if st.reset || c.closed {
			return 0, 0, errStreamClosed
		}
		if avail := min(st.sendWindow, c.sendWindow); avail > 0 {
			k := min(int64(n), avail, int64(c.peerMaxFrame))
			st.sendWindow -= k
			c.sendWindow -= k
			return int(k), c.settingsGen, nil
		}
		if !deadline.IsZero() {
			left := time.Until(deadline)
			if left <= 0 {
				return 0, 0, errWriteTimeout
			}
			if timer == nil {
				timer = time.AfterFunc(left, func() {
					c.mu.Lock()
					c.cond.Broadcast()
					c.mu.Unlock()
				})
			}
		}
		// What was written must reach the client before it can grant
		// more window.
		c.mu.Unlock()
		err := c.flush()
		c.mu.Lock()
		if err != nil {
			return 0, 0, err
		}
		// The deadline is checked again too: its timer may have fired
		// while the lock was out for the flush, and its Broadcast then
		// woke nobody (a loaded clean-clone run found hit goroutines of a
		// client that never opened its window waiting for good).
		if min(st.sendWindow, c.sendWindow) > 0 || st.reset || c.closed || !deadline.IsZero() && !time.Now().Before(deadline) {
			continue
		}
		c.cond.Wait()
	}
}

var errWriteTimeout = errors.New("h2server: write timeout")

// sendData writes p as DATA frames within the send windows, the last with
// END_STREAM when end is set.
func (st *stream) sendData(p []byte, end bool, deadline time.Time) error {
	c := st.c
	if len(p) == 0 {
		if !end {
			return nil
		}
		c.wmu.Lock()
		err := c.writeDataLocked(st, nil, true)
		c.wmu.Unlock()
		return err
	}
	for len(p) > 0 {
		n, gen, err := st.reserve(len(p), deadline)
		if err != nil {
			return err
		}
		c.wmu.Lock()
		// A SETTINGS frame handled between the reservation and wmu (its ACK
		// is now written) may have lowered the frame size or the window the
		// reservation was made under: what is written after the ACK must
		// fit the new ones, so the reservation is given back and made again.
		// A stream reset meanwhile writes nothing, and its bytes are given
		// back too: the client never sees them and would never return them.
		c.mu.Lock()
		closed, stale := st.writesClosed, c.settingsGen != gen
		if closed || stale {
			st.sendWindow += int64(n)
			c.sendWindow += int64(n)
			c.cond.Broadcast()
		}
		c.mu.Unlock()
		if closed {
			c.wmu.Unlock()
			return errStreamClosed
		}
		if stale {
			c.wmu.Unlock()
			continue
		}
		err = c.writeDataLocked(st, p[:n], end && n == len(p))
		c.wmu.Unlock()
		if err != nil {
			return err
		}
		p = p[n:]
	}
	return nil
}

func (c *conn) writeDataLocked(st *stream, p []byte, end bool) error {
	if st.writesClosed {
		return errStreamClosed
	}
	if c.werr != nil {
		return c.werr
	}
	return c.fr.WriteData(st.id, end, p)
}

// requestFields are a request's pseudo-header fields and framing, checked.
type requestFields struct {
	method, scheme, authority, path string
	declared                        int64
}

// readRequestFields checks a request's header list as RFC 9113 §8.2–8.3
// requires (the framer has checked names, values and pseudo-field order).
func readRequestFields(f *http2.MetaHeadersFrame) (requestFields, error) {
	rp := requestFields{
		method:    f.PseudoValue("method"),
		scheme:    f.PseudoValue("scheme"),
		authority: f.PseudoValue("authority"),
		path:      f.PseudoValue("path"),
		declared:  -1,
	}
	if f.PseudoValue("status") != "" || f.PseudoValue("protocol") != "" {
		return rp, errors.New("response or extended CONNECT pseudo-field in a request")
	}
	if rp.authority != "" && (strings.IndexByte(rp.authority, '@') >= 0 || !httpguts.ValidHostHeader(rp.authority)) {
		return rp, errors.New("malformed :authority") // userinfo is forbidden (RFC 9113 §8.3.1)
	}
	if rp.method == http.MethodConnect {
		if rp.scheme != "" || rp.path != "" || rp.authority == "" {
			return rp, errors.New("malformed CONNECT")
		}
	} else if rp.method == "" || rp.scheme == "" || rp.path == "" {
		return rp, errors.New("missing :method, :scheme or :path")
	}
	for _, hf := range f.RegularFields() {
		switch hf.Name {
		case "connection", "proxy-connection", "keep-alive", "transfer-encoding", "upgrade":
			return rp, errors.New("connection-specific field " + hf.Name)
		case "te":
			if hf.Value != "trailers" {
				return rp, errors.New("te other than trailers")
			}
		case "content-length":
			n, ok := parseLength(hf.Value)
			if !ok || (rp.declared >= 0 && n != rp.declared) {
				return rp, errors.New("bad content-length")
			}
			rp.declared = n
		}
	}
	if f.StreamEnded() && rp.declared > 0 {
		return rp, errors.New("content-length without a body")
	}
	return rp, nil
}

// newRequest builds the http.Request a handler gets, as net/http's HTTP/2
// server builds it.
func (c *conn) newRequest(st *stream, rp requestFields, f *http2.MetaHeadersFrame) (*http.Request, error) {
	header := make(http.Header, len(f.RegularFields()))
	var cookies []string
	for _, hf := range f.RegularFields() {
		if hf.Name == "cookie" {
			cookies = append(cookies, hf.Value) // crumbs are joined (RFC 9113 §8.2.3)
			continue
		}
		k := http.CanonicalHeaderKey(hf.Name)
		header[k] = append(header[k], hf.Value)
	}
	if len(cookies) > 0 {
		header["Cookie"] = []string{strings.Join(cookies, "; ")}
	}
	host := rp.authority
	if host == "" {
		host = header.Get("Host")
	}
	delete(header, "Host")
	req := &http.Request{
		Method: rp.method, Proto: "HTTP/2.0", ProtoMajor: 2, Header: header, Host: host,
		RemoteAddr: c.remote, TLS: c.tls, ContentLength: rp.declared,
	}
	var err error
	if rp.method == http.MethodConnect {
		req.URL, req.RequestURI = urlOfHost(rp.authority), rp.authority
	} else {
		req.RequestURI = rp.path
		if req.URL, err = url.ParseRequestURI(rp.path); err != nil {
			return nil, err
		}
	}
	if vv := header["Trailer"]; len(vv) > 0 {
		req.Trailer = http.Header{}
		for _, v := range vv {
			for _, k := range strings.Split(v, ",") {
				if k = http.CanonicalHeaderKey(strings.TrimSpace(k)); k != "" {
					req.Trailer[k] = nil
				}
			}
		}
	}
	if st.remoteDone {
		req.Body, req.ContentLength = http.NoBody, 0
	} else {
		st.body = newPipe(st)
		st.body.req = req
		if httpguts.HeaderValuesContainsToken(header["Expect"], "100-continue") {
			st.body.needContinue = true
			delete(header, "Expect")
		}
		req.Body = st.body
		if rp.declared < 0 {
			req.ContentLength = -1
		}
	}
	return req.WithContext(st.ctx), nil
}

// runHandler serves a request with the handler, in a goroutine.
func (c *conn) runHandler(st *stream, rp requestFields, f *http2.MetaHeadersFrame) error {
	st.ctx, st.cancel = context.WithCancel(c.ctx)
	req, err := c.newRequest(st, rp, f)
	if err != nil {
		st.cancel()
		return http2.StreamError{StreamID: st.id, Code: http2.ErrCodeProtocol, Cause: err}
	}
	c.srv.Metrics.countHandler()
	c.mu.Lock()
	c.running++
	c.mu.Unlock()
	c.handlers.Add(1)
	go c.serveStream(st, req)
	return nil
}

func (c *conn) serveStream(st *stream, req *http.Request) {
	rw := &responseWriter{st: st, head: req.Method == http.MethodHead, hdr: http.Header{}, declared: -1}
	if c.srv.WriteTimeout > 0 {
		rw.deadline = time.Now().Add(c.srv.WriteTimeout)
	}
	defer func() {
		st.cancel()
		if req.Body != nil {
			_ = req.Body.Close()
		}
		c.mu.Lock()
		c.running--
		c.mu.Unlock()
		c.handlers.Done()
	}()
	panicked := true
	defer func() {
		if !panicked {
			return
		}
		if p := recover(); p != nil && p != http.ErrAbortHandler {
			c.srv.log().Error("http2 handler panicked", "remote", c.remote, "uri", req.RequestURI, "panic", p)
		}
		c.resetStream(st.id, http2.ErrCodeInternal)
		_ = c.flush()
	}()
	c.handler.ServeHTTP(rw, req)
	panicked = false
	rw.finish()
}

// pipe is a request body: the loop writes what arrives, the handler reads.
type pipe struct {
	st  *stream
	req *http.Request // its Trailer gets the client's trailers at the body's end
	// needContinue: the client waits for 100 Continue (Expect), sent when
	// the handler first reads.
	needContinue bool
	mu           sync.Mutex
	cond         sync.Cond
	buf          []byte
	err          error // io.EOF at the end, or why the stream ended
	trailer      http.Header
	closed       bool      // the handler closed the body
	deadline     time.Time // SetReadDeadline's (zero: none)
	timer        *time.Timer
}

// setDeadline bounds the handler's reads (http.ResponseController's
// SetReadDeadline: limits.body_timeout and min_body_rate, and a deadline in
// the past to stop reading a body the proxy will not use).
func (p *pipe) setDeadline(t time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.deadline = t
	if p.timer != nil {
		p.timer.Stop()
		p.timer = nil
	}
	if t.IsZero() {
		return
	}
	if d := time.Until(t); d > 0 {
		p.timer = time.AfterFunc(d, func() {
			p.mu.Lock()
			p.cond.Broadcast()
			p.mu.Unlock()
		})
		return
	}
	p.cond.Broadcast() // a reader blocked now returns
}

func (p *pipe) pastDeadline() bool { return !p.deadline.IsZero() && !time.Now().Before(p.deadline) }

func newPipe(st *stream) *pipe {
	p := &pipe{st: st}
	p.cond.L = &p.mu
	return p
}

// write adds data; false when the reader is gone (the caller returns the
// window).
func (p *pipe) write(data []byte) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || p.err != nil {
		return false
	}
	p.buf = append(p.buf, data...)
	p.cond.Signal()
	return true
}

func (p *pipe) closeWithError(err error, trailer http.Header) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.err == nil {
		p.err, p.trailer = err, trailer
	}
	p.cond.Broadcast()
}

// empty reports whether nothing is buffered.
func (p *pipe) empty() bool {
	if p == nil {
		return true
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.buf) == 0
}

// discard drops what is buffered and returns its length.
func (p *pipe) discard() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := int64(len(p.buf))
	p.buf = nil
	p.closed = true
	if p.timer != nil {
		p.timer.Stop()
		p.timer = nil
	}
	p.cond.Broadcast() // a reader blocked in Read returns
	return n
}

// Read implements io.Reader for the handler.
func (p *pipe) Read(b []byte) (int, error) {
	if p.needContinue {
		p.needContinue = false
		p.sendContinue()
	}
	p.mu.Lock()
	for len(p.buf) == 0 && p.err == nil && !p.closed && !p.pastDeadline() {
		p.cond.Wait()
	}
	if p.closed {
		p.mu.Unlock()
		return 0, errors.New("http2: request body closed")
	}
	if len(p.buf) == 0 && p.err == nil {
		p.mu.Unlock()
		return 0, os.ErrDeadlineExceeded // a net.Error whose Timeout() is true, as net/http's
	}
	if len(p.buf) == 0 {
		err, trailer := p.err, p.trailer
		p.trailer = nil
		p.mu.Unlock()
		if err == io.EOF && trailer != nil {
			// As net/http's server: the trailers are the request's once
			// its body has been read to the end (the reader is the
			// handler's goroutine, or one it waits for).
			if p.req.Trailer == nil {
				p.req.Trailer = http.Header{}
			}
			for k, vv := range trailer {
				p.req.Trailer[k] = vv
			}
		}
		return 0, err
	}
	n := copy(b, p.buf)
	p.buf = p.buf[n:]
	if len(p.buf) == 0 {
		p.buf = nil // a long upload does not keep its first buffer
	}
	p.mu.Unlock()
	p.st.c.returnWindow(p.st, int64(n))
	return n, nil
}

// sendContinue sends 100 Continue unless the body has begun to arrive.
func (p *pipe) sendContinue() {
	p.mu.Lock()
	started := len(p.buf) > 0 || p.err != nil
	p.mu.Unlock()
	if started {
		return
	}
	c := p.st.c
	c.wmu.Lock()
	_ = c.writeHeadersLocked(p.st, http.StatusContinue, nil, false)
	c.wmu.Unlock()
	_ = c.flush()
}

// Close implements io.Closer: what is unread is discarded.
func (p *pipe) Close() error {
	n := p.discard()
	if n > 0 {
		p.st.c.returnWindow(nil, n)
	}
	return nil
}

// appendFields adds a response's fields for HEADERS, sorted; names are
// lower-cased and connection-specific fields dropped (RFC 9113 §8.2.2).
func appendFields(dst []hpack.HeaderField, h http.Header, skip func(string) bool) []hpack.HeaderField {
	keys := make([]string, 0, len(h))
	for k := range h {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		if skip != nil && skip(k) {
			continue
		}
		lk := strings.ToLower(k)
		switch lk {
		case "connection", "proxy-connection", "keep-alive", "transfer-encoding", "upgrade":
			continue
		}
		if !httpguts.ValidHeaderFieldName(lk) {
			continue
		}
		for _, v := range h[k] {
			if !httpguts.ValidHeaderFieldValue(v) {
				continue // as net/http drops a value it cannot send
			}
			dst = append(dst, hpack.HeaderField{Name: lk, Value: v})
		}
	}
	return dst
}

// urlOfHost is a CONNECT request's URL.
func urlOfHost(authority string) *url.URL { return &url.URL{Host: authority} }
