package h2server

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// responseWriter is a handler's http.ResponseWriter, with Flush,
// FlushError and SetWriteDeadline for http.ResponseController. It behaves
// as net/http's HTTP/2 one does: the header is sent at the first flush (a
// full chunk, Flush, or the handler's return), Content-Length is added
// when the handler returns with the whole body still gathered, and a
// Content-Type is sniffed when the handler set none.
type responseWriter struct {
	st       *stream
	head     bool // a HEAD request: the body is counted, not sent
	hdr      http.Header
	snap     http.Header // hdr as of WriteHeader
	status   int
	declared int64 // the Content-Length the handler set (-1: none)
	written  int64
	deadline time.Time
	buf      *[]byte // gathered body bytes (pooled)
	sniff    []byte  // a HEAD response's first bytes, to sniff its Content-Type as for GET

	wroteHeader, sentHeader bool
}

// sniffLen is what http.DetectContentType reads.
const sniffLen = 512

var chunkPool = sync.Pool{New: func() any { b := make([]byte, 0, handlerChunkBytes); return &b }}

func (rw *responseWriter) Header() http.Header { return rw.hdr }

// WritesInformationalInPlace tells package proxy that WriteHeader(1xx)
// is done with the header map when it returns (the fields are encoded on
// the caller's goroutine, then written under the connection's lock), so
// the map may be changed at once. net/http's HTTP/2 server hands the map to
// its frame writer and may return first.
func (rw *responseWriter) WritesInformationalInPlace() {}

// WriteHeader implements http.ResponseWriter. Informational statuses
// (103 Early Hints) are sent at once; the final one waits for the body.
func (rw *responseWriter) WriteHeader(code int) {
	if rw.wroteHeader {
		return
	}
	if code < 100 || code > 999 {
		panic(fmt.Sprintf("invalid WriteHeader code %v", code))
	}
	if code < 200 {
		if code == http.StatusSwitchingProtocols {
			return // no such thing in HTTP/2
		}
		c := rw.st.c
		fields := appendFields(nil, rw.hdr, nil)
		c.wmu.Lock()
		_ = c.writeHeadersLocked(rw.st, code, fields, false)
		c.wmu.Unlock()
		_ = c.flush()
		return
	}
	rw.wroteHeader, rw.status = true, code
	rw.snap = rw.hdr.Clone()
	if cl := rw.snap.Get("Content-Length"); cl != "" {
		if n, ok := parseLength(cl); ok {
			rw.declared = n
			rw.snap["Content-Length"] = []string{strconv.FormatInt(n, 10)}
		} else {
			delete(rw.snap, "Content-Length") // net/http drops a malformed one too
		}
	}
}

// parseLength reads a Content-Length: digits only (no sign), as net/http.
func parseLength(v string) (int64, bool) {
	if v == "" || len(v) > 18 {
		return 0, false
	}
	var n int64
	for i := 0; i < len(v); i++ {
		if v[i] < '0' || v[i] > '9' {
			return 0, false
		}
		n = n*10 + int64(v[i]-'0')
	}
	return n, true
}

func bodyAllowed(status int) bool {
	return status >= 200 && status != http.StatusNoContent && status != http.StatusNotModified
}

// Write implements http.ResponseWriter.
func (rw *responseWriter) Write(p []byte) (int, error) {
	if !rw.wroteHeader {
		rw.WriteHeader(http.StatusOK)
	}
	if !bodyAllowed(rw.status) {
		return 0, http.ErrBodyNotAllowed
	}
	if rw.declared >= 0 && rw.written+int64(len(p)) > rw.declared {
		return 0, http.ErrContentLength
	}
	rw.written += int64(len(p))
	if rw.head {
		if _, ok := rw.snap["Content-Type"]; !ok && len(rw.sniff) < sniffLen && !rw.sentHeader {
			rw.sniff = append(rw.sniff, p[:min(len(p), sniffLen-len(rw.sniff))]...)
		}
		return len(p), nil
	}
	if rw.buf == nil {
		rw.buf = chunkPool.Get().(*[]byte)
	}
	if len(*rw.buf)+len(p) <= handlerChunkBytes {
		*rw.buf = append(*rw.buf, p...)
		return len(p), nil
	}
	if err := rw.sendGathered(); err != nil {
		return 0, err
	}
	if len(p) < handlerChunkBytes {
		*rw.buf = append(*rw.buf, p...)
		return len(p), nil
	}
	if err := rw.st.sendData(p, false, rw.deadline); err != nil {
		return 0, rw.writeFailed(err)
	}
	return len(p), nil
}

// sendGathered sends the header (if not yet) and the gathered bytes.
func (rw *responseWriter) sendGathered() error {
	if !rw.sentHeader {
		if err := rw.sendHeader(false, false); err != nil {
			return rw.writeFailed(err)
		}
	}
	if rw.buf == nil || len(*rw.buf) == 0 {
		return nil
	}
	err := rw.st.sendData(*rw.buf, false, rw.deadline)
	*rw.buf = (*rw.buf)[:0]
	if err != nil {
		return rw.writeFailed(err)
	}
	return nil
}

// writeFailed resets a stream whose write timed out; other errors (the
// stream or connection gone) need nothing more.
func (rw *responseWriter) writeFailed(err error) error {
	if err == errWriteTimeout {
		rw.st.c.resetStream(rw.st.id, http2.ErrCodeCancel)
	}
	return err
}

// sendHeader sends the response's HEADERS. complete: the handler has
// returned, so a body still gathered is the whole body.
func (rw *responseWriter) sendHeader(end, complete bool) error {
	rw.sentHeader = true
	c := rw.st.c
	h := rw.snap
	fields := make([]hpack.HeaderField, 0, len(h)+3)
	fields = appendFields(fields, h, isTrailerKey)
	var gathered []byte
	if rw.buf != nil {
		gathered = *rw.buf
	}
	sniffed := gathered
	if rw.head {
		sniffed = rw.sniff
	}
	if _, ok := h["Content-Type"]; !ok && bodyAllowed(rw.status) && len(sniffed) > 0 {
		fields = append(fields, hpack.HeaderField{Name: "content-type", Value: http.DetectContentType(sniffed)})
	}
	if complete && rw.declared < 0 && bodyAllowed(rw.status) && (rw.written > 0 || !rw.head) {
		n := int64(len(gathered))
		if rw.head {
			n = rw.written
		}
		fields = append(fields, hpack.HeaderField{Name: "content-length", Value: strconv.FormatInt(n, 10)})
	}
	if _, ok := h["Date"]; !ok {
		line := c.srv.dates.Line(time.Now())
		fields = append(fields, hpack.HeaderField{Name: "date", Value: string(line[len("Date: ") : len(line)-2])})
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	return c.writeHeadersLocked(rw.st, rw.status, fields, end)
}

// isTrailerKey reports a field the handler means as a trailer.
func isTrailerKey(k string) bool { return strings.HasPrefix(k, http.TrailerPrefix) }

// Flush implements http.Flusher.
func (rw *responseWriter) Flush() { _ = rw.FlushError() }

// FlushError sends what the handler wrote so far (http.ResponseController).
func (rw *responseWriter) FlushError() error {
	if !rw.wroteHeader {
		rw.WriteHeader(http.StatusOK)
	}
	if err := rw.sendGathered(); err != nil {
		return err
	}
	return rw.st.c.flush()
}

// SetWriteDeadline bounds the wait for the client's flow-control window
// (http.ResponseController).
func (rw *responseWriter) SetWriteDeadline(t time.Time) error {
	rw.deadline = t
	return nil
}

// SetReadDeadline bounds the handler's reads of the request body
// (http.ResponseController).
func (rw *responseWriter) SetReadDeadline(t time.Time) error {
	if rw.st.body != nil {
		rw.st.body.setDeadline(t)
	}
	return nil
}

// trailerFields are the trailers the handler set: the keys it declared in
// Trailer before WriteHeader, and those named with http.TrailerPrefix.
func (rw *responseWriter) trailerFields() []hpack.HeaderField {
	var out []hpack.HeaderField
	for _, v := range rw.snap["Trailer"] {
		for _, k := range strings.Split(v, ",") {
			k = http.CanonicalHeaderKey(strings.TrimSpace(k))
			if k == "" {
				continue
			}
			out = appendFields(out, http.Header{k: rw.hdr[k]}, nil)
		}
	}
	for k, vv := range rw.hdr {
		if isTrailerKey(k) {
			out = appendFields(out, http.Header{strings.TrimPrefix(k, http.TrailerPrefix): vv}, nil)
		}
	}
	return out
}

// finish ends the response after the handler returned.
func (rw *responseWriter) finish() {
	st, c := rw.st, rw.st.c
	defer func() {
		if rw.buf != nil {
			*rw.buf = (*rw.buf)[:0]
			chunkPool.Put(rw.buf)
			rw.buf = nil
		}
	}()
	if !rw.wroteHeader {
		rw.WriteHeader(http.StatusOK)
	}
	short := rw.declared >= 0 && !rw.head && bodyAllowed(rw.status) && rw.written < rw.declared
	var trailers []hpack.HeaderField
	if !rw.head {
		trailers = rw.trailerFields() // a HEAD response has no body and so no trailers
	}
	var gathered []byte
	if rw.buf != nil {
		gathered = *rw.buf
	}
	var err error
	switch {
	case short:
		// The body is shorter than its Content-Length: the client must
		// not take it as complete (a cache downstream would store it).
		if err = rw.sendGathered(); err == nil {
			c.resetStream(st.id, http2.ErrCodeInternal)
		}
		_ = c.flush()
		return
	case !rw.sentHeader && len(gathered) == 0 && len(trailers) == 0:
		err = rw.sendHeader(true, true)
	default:
		if !rw.sentHeader {
			if err = rw.sendHeader(false, true); err != nil {
				break
			}
		}
		if err = st.sendData(gathered, len(trailers) == 0, rw.deadline); err != nil || len(trailers) == 0 {
			break
		}
		c.wmu.Lock()
		if st.writesClosed {
			err = errStreamClosed
		} else {
			c.hbuf.Reset()
			for _, hf := range trailers {
				c.writeField(hf)
			}
			err = c.writeBlockLocked(st.id, c.hbuf.Bytes(), true)
			c.shrinkHeaderBuffer()
		}
		c.wmu.Unlock()
	}
	if err != nil {
		_ = rw.writeFailed(err)
		_ = c.flush()
		return
	}
	st.endLocal()
	c.mu.Lock()
	stillSending := !st.remoteDone
	c.mu.Unlock()
	if stillSending {
		// The response is complete before the request: the client may
		// stop sending it (RFC 9113 §8.1).
		c.resetStream(st.id, http2.ErrCodeNo)
	}
	_ = c.flush()
}
