package proxy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/edgecache/edge/coding"
)

// writeChunk is the most a single write to a client carries; the write
// deadline is extended before each one, so a client must take at least
// writeChunk bytes per WriteTimeout to stay connected.
const writeChunk = 32 << 10

// extendWrite moves the client connection's write deadline WriteTimeout
// into the future. A writer that does not support deadlines (a recorder in
// tests) is left as is.
func (h *Handler) extendWrite(w http.ResponseWriter) {
	if h.cfg.WriteTimeout > 0 {
		_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(h.cfg.WriteTimeout))
	}
}

// hsts is the field an origin's Strict-Transport-Security answer sets.
const hsts = "Strict-Transport-Security"

// plainClient reports whether r is a client's (not a peer's) whose scheme
// is http, to whom an origin's Strict-Transport-Security is not passed: a
// host MUST NOT send it over plain HTTP (RFC 6797 §7.2), and http and
// https share entries unless cache.key_scheme is on, so one https fill
// gave it to every plain hit (a review's
// TestS73OriginsHSTSFromAnHTTPSFillIsNotServedOverPlainHTTP). A peer gets
// the entry's fields whole: its own client decides.
func (h *Handler) plainClient(r *http.Request) bool {
	return !inboundOf(r).Relayed && h.scheme(r) != "https"
}

// setEntryHeader fills w's header from a stored entry, with our Age,
// Cache-Status and Via, and the requester's own per-user fields. The
// stored copy's Edge-Cache-Control is a peer's alone (edgeTargeted).
func (h *Handler) setEntryHeader(w http.ResponseWriter, r *http.Request, e *Entry, now time.Time, status cacheStatus, own http.Header) {
	hdr := w.Header()
	plain := len(e.Header[hsts]) > 0 && h.plainClient(r)
	for k, v := range e.Header {
		if !plain || k != hsts {
			hdr[k] = v
		}
	}
	if !inboundOf(r).Relayed {
		h.dropEdgeTargeted(hdr)
	}
	for k, v := range own {
		hdr[k] = v
	}
	if _, ok := e.Header["Content-Type"]; !ok {
		hdr["Content-Type"] = nil // never sniff: serve what the origin said
	}
	hdr["Age"] = ageValue(e.Age(now))
	hdr["Cache-Status"] = h.field(status)
	hdr["Via"] = h.viaFor(e)
}

// writeEntry answers r from a complete entry. own holds per-user fields
// for this requester alone (nil for anyone else).
func (h *Handler) writeEntry(w http.ResponseWriter, r *http.Request, e *Entry, now time.Time, status cacheStatus, own http.Header) {
	if e.sliceTotal > 0 {
		h.serveSliced(w, r, e, status, own, nil, true, h.purges.Load())
		return
	}
	base := e // the stored entry: pinned while any of its forms is written
	if e.offers != 0 {
		d, live, err := h.represent(r, e)
		if live != coding.Identity {
			h.encodeLive(w, r, e, now, status, own, live)
			return
		}
		if errors.Is(err, coding.ErrBudget) {
			// The coding work would spend memory the buffer budget does
			// not have: refused before anything was allocated.
			w.Header().Set("Retry-After", "1")
			h.writeError(w, http.StatusServiceUnavailable, refused("miss", string(whyBufferFull)), "too much in flight")
			return
		}
		if err != nil {
			h.writeError(w, http.StatusBadGateway, refused("miss", "undecodable"), "the origin sent a body that cannot be decoded within limits")
			return
		}
		if d.transient {
			// A form too large to keep with its entry: its bytes were
			// charged to the buffer budget before they were made, and
			// stay charged while this client reads them.
			defer h.releaseTransient(d)
		}
		e = d
	}
	h.setEntryHeader(w, r, e, now, status, own)
	if !status.plainHit() {
		// A fresh hit is written at once, within the deadline net/http set
		// when the request arrived; other answers may follow a wait.
		h.extendWrite(w)
	}
	if e.Status == http.StatusOK && needsServeContent(r) {
		h.serveContent(w, r, e, base)
		return
	}
	w.WriteHeader(e.Status)
	if r.Method == http.MethodHead {
		return
	}
	if len(e.Body) <= writeChunk {
		_, _ = w.Write(e.Body)
		return
	}
	base.users.Add(1)
	defer h.unpin(base)
	_, _ = (&deadlineWriter{ResponseWriter: w, h: h}).Write(e.Body)
}

// encodeLive answers r from the identity entry e encoded in enc as it is
// written, at the stream level, holding one of the live slots (taken by
// chooseForm) until the write ends. Without memory for an encoder it
// answers in identity.
func (h *Handler) encodeLive(w http.ResponseWriter, r *http.Request, e *Entry, now time.Time, status cacheStatus, own http.Header, enc coding.Encoding) {
	defer h.giveLiveSlot()
	h.setEntryHeader(w, r, e, now, status, own)
	var out io.Writer = w
	if r.Method != http.MethodHead {
		ew, err := h.newEncodingWriter(w, enc)
		switch {
		case errors.Is(err, coding.ErrBudget):
			enc = coding.Identity // no memory for an encoder: identity, Vary kept
		case err != nil:
			clear(w.Header()) // the entry's fields describe a body this answer does not carry
			h.writeError(w, http.StatusInternalServerError, refused("miss", "encoder"), "encoder unavailable")
			return
		default:
			defer func() { _ = ew.Close() }() // idempotent; gives the encoder back on every path
			out = ew
		}
	}
	if enc != coding.Identity {
		setCodingFields(w.Header(), enc, -1, true, h.formTag(enc))
	}
	h.metrics.compression.served[enc].Inc()
	h.extendWrite(w)
	w.WriteHeader(e.Status)
	if r.Method == http.MethodHead {
		return
	}
	e.users.Add(1) // pinned while it is written, as writeEntry pins
	defer h.unpin(e)
	for body := e.Body; len(body) > 0; {
		n := min(len(body), writeChunk)
		h.extendWrite(w)
		if _, err := out.Write(body[:n]); err != nil {
			return
		}
		body = body[n:]
	}
	if ew, ok := out.(*encodingWriter); ok && ew.Close() != nil {
		panic(http.ErrAbortHandler) // the end of the stream did not reach the client
	}
}

// serveFill answers r from a fill, writing its body as it arrives. rd is
// the request's reader if it registered one already (the leader does, so
// that a fill that cannot be kept waits for it), else nil.
func (h *Handler) serveFill(w http.ResponseWriter, r *http.Request, f *fill, rd *fillReader, status cacheStatus, own http.Header) {
	if whole := f.final(); whole != nil && rd == nil {
		// The body is in: serve it as a stored entry, which also keeps
		// its memory accounted while this client reads it.
		h.writeEntry(w, r, whole, h.now(), status, own)
		return
	}
	if needsServeContent(r) || h.needsDecode(r, f.entry) || (rd == nil && h.needsEncode(r, f.entry)) {
		leader := rd != nil
		if rd != nil {
			rd.Close() // we read the whole body, not along
			rd = nil
		}
		// Conditionals and ranges are answered from the whole body; a body
		// too large to keep is asked of the origin with the client's own
		// Range and conditionals instead.
		if f.waitDoneOrTrim(r.Context()) {
			if whole := f.final(); whole != nil {
				h.writeEntry(w, r, whole, h.now(), status, own)
				return
			}
			if leader {
				// Our fill is trimming and we left it: with no other reader
				// its pump ends and gives its upstream slot back, which the
				// forwarded request may need.
				ctx, cancel := context.WithTimeout(r.Context(), time.Second)
				f.waitDone(ctx)
				cancel()
			}
			h.servePass(w, r, whyTooLarge)
			return
		}
		return // the client left
	}
	if rd == nil {
		var ok bool
		if rd, ok = f.reader(); !ok {
			rd = nil
		}
	}
	if rd == nil {
		// A body too large to keep, already past its first bytes: this
		// client gets its own fetch.
		h.servePass(w, r, whyTooLarge)
		return
	}
	defer rd.Close()
	h.serveFrom(w, r, f, rd, status, own)
}

// serveFrom writes f's response with the body read through rd. The header
// goes out with the first bytes, or as soon as rd has to wait for them
// (flushed then, as before): a reader the fill leaves behind before it was
// sent anything (the window filled while it waited for its turn on a
// loaded machine, TestReviewSpoolStressHTTP/h2's stream reset before its
// header) gets its own fetch, as one too late for the fill does, instead
// of a reset.
func (h *Handler) serveFrom(w http.ResponseWriter, r *http.Request, f *fill, rd *fillReader, status cacheStatus, own http.Header) {
	e := f.entry
	var out io.Writer = w
	var ew *encodingWriter
	defer func() {
		if ew != nil {
			_ = ew.Close() // idempotent; gives the encoder back on every path
		}
	}()
	flush := func() { _ = http.NewResponseController(w).Flush() }
	sent := false // head is the only writer of w's header here
	head := func() {
		if sent {
			return
		}
		sent = true
		h.setEntryHeader(w, r, e, h.now(), status, own)
		if e.offers != 0 { // an identity body: serveFill sends encoded ones whole
			to := coding.NegotiateStream(r.Header["Accept-Encoding"], e.offers) // encoded as it is sent: the cheapest coder
			if to != e.coding && r.Method != http.MethodHead {
				enc, err := h.newEncodingWriter(w, to)
				switch {
				case errors.Is(err, coding.ErrBudget):
					to = e.coding // no memory for an encoder: identity, Vary kept
				case err != nil:
					panic(http.ErrAbortHandler) // no header sent yet: the client sees a reset, not a wrong body
				default:
					ew, out = enc, enc
					flush = func() { _ = enc.Flush(); _ = http.NewResponseController(w).Flush() }
				}
			}
			if to != e.coding {
				setCodingFields(w.Header(), to, -1, true, h.formTag(to))
			}
			h.metrics.compression.served[to].Inc()
		}
		h.extendWrite(w)
		w.WriteHeader(e.Status)
	}
	if r.Method == http.MethodHead {
		head()
		return
	}
	b, err := rd.next(r.Context(), func() { head(); flush() })
	if !sent && len(b) == 0 && errors.Is(err, errReaderTooSlow) {
		rd.Close() // nothing of the entry is in w's header yet: head never ran
		h.servePass(w, r, whyTooLarge)
		return
	}
	head()
	for {
		if len(b) > 0 {
			h.extendWrite(w)
			if _, werr := out.Write(b); werr != nil {
				return
			}
		}
		if errors.Is(err, io.EOF) {
			if ew != nil {
				_ = ew.Close() // the stream's end, before the handler returns
			}
			return
		}
		if err != nil {
			if ew != nil {
				ew.abort() // no end-of-stream block: the body must not decode as whole
			}
			if r.Context().Err() == nil {
				// The upstream body failed: end the connection so the
				// client cannot take a truncated body for a whole one.
				panic(http.ErrAbortHandler)
			}
			return
		}
		b, err = rd.next(r.Context(), flush)
	}
}

// needsServeContent is true when the request has conditional or range
// fields that http.ServeContent evaluates for us.
func needsServeContent(r *http.Request) bool {
	hd := r.Header
	return len(hd["Range"]) > 0 || len(hd["If-None-Match"]) > 0 || len(hd["If-Modified-Since"]) > 0 ||
		len(hd["If-Match"]) > 0 || len(hd["If-Unmodified-Since"]) > 0
}

// ignoreRangeUnlessGET drops r's Range and If-Range unless r is a GET:
// a server MUST ignore Range on any other method (RFC 9110 §14.2), and a
// HEAD's fields are the GET's (§9.3.2), so a HEAD with a Range answered
// 206 with the part's length told a cache that freshens its 200 from a
// HEAD another Content-Length (a review's TestS67RangeOnHeadIsIgnored).
func ignoreRangeUnlessGET(r *http.Request) {
	if r.Method != http.MethodGet {
		delete(r.Header, "Range")
		delete(r.Header, "If-Range")
	}
}

// serveContent answers r's conditionals and ranges from e, a stored entry
// or one of its forms; base (the stored entry) is pinned while it is written.
func (h *Handler) serveContent(w http.ResponseWriter, r *http.Request, e, base *Entry) {
	ignoreRangeUnlessGET(r)
	hdr := w.Header()
	delete(hdr, "Content-Length")
	if len(r.Header["If-Range"]) > 0 && !strongTag(r.Header.Get("If-Range")) &&
		(e.coding != coding.Identity || (base.offers != 0 && coding.Negotiate(r.Header["Accept-Encoding"], base.offers) != coding.Identity)) {
		// An encoded body's bytes depend on how it was encoded (a stream
		// that paused, another level on another node): only its strong
		// ETag names them. A date, or a weak tag, could splice a range of
		// one encoding onto the start of another, so send it whole: when
		// this answer is encoded, and when it is not but the client takes
		// a coding the page is offered in (its first part may have come
		// encoded: a form larger than the body, a full budget, a review's
		// TestS8RIfRangeDateNeverSplicesGzipPrefixWithIdentitySuffix).
		delete(r.Header, "Range")
	}
	dw := &deadlineWriter{ResponseWriter: w, h: h}
	if tag := hdr.Get("Etag"); e.coding != coding.Identity && strongTag(tag) && matchesOnlyWeakly(r.Header.Get("If-None-Match"), tag) {
		// The client holds bytes we tagged weak with this tag's opaque
		// part (an encoded stream: other bytes than this stored form's),
		// so the 304 it gets names them weak. With the strong tag a cache
		// that updates its stored fields from a 304 takes it for the
		// stream's bytes, and its next If-Range splices the form's bytes
		// onto them. Only on the 304: the conditionals are evaluated
		// with the strong tag (If-Match compares strongly), and any other
		// answer sends the form's own bytes under it.
		dw.weakOn304 = "W/" + tag
	}
	if rng := r.Header["Range"]; len(rng) > 1 {
		delete(r.Header, "Range") // several Range lines: ignored (RFC 9110 §14.2), never multiplied
	} else if len(rng) == 1 {
		if limited, ok := limitRanges(rng[0], int64(len(e.Body)), h.cfg.MaxRanges); !ok {
			h.metrics.Rejected.WithLabelValues("too_many_ranges").Inc()
			delete(r.Header, "Range") // RFC 9110 §14.2: a server may ignore Range
		} else {
			r.Header["Range"] = []string{limited}
		}
	}
	base.users.Add(1)
	defer h.unpin(base)
	http.ServeContent(dw, r, "", e.lastMod, bytes.NewReader(e.Body))
}

// deadlineWriter writes in chunks of writeChunk, extending the write
// deadline before each.
type deadlineWriter struct {
	http.ResponseWriter
	h *Handler
	// weakOn304, when set, is the ETag a 304 carries instead of the
	// entry's (serveContent: a client revalidating a stream's bytes).
	weakOn304 string
}

func (d *deadlineWriter) WriteHeader(code int) {
	if code == http.StatusNotModified && d.weakOn304 != "" {
		d.Header()["Etag"] = []string{d.weakOn304}
	}
	d.ResponseWriter.WriteHeader(code)
}

func (d *deadlineWriter) Write(b []byte) (int, error) {
	n := 0
	for len(b) > 0 {
		c := min(len(b), writeChunk)
		d.h.extendWrite(d.ResponseWriter)
		m, err := d.ResponseWriter.Write(b[:c])
		n += m
		if err != nil {
			return n, err
		}
		b = b[c:]
	}
	return n, nil
}

func (d *deadlineWriter) Unwrap() http.ResponseWriter { return d.ResponseWriter }

// stream copies an upstream response to the client without storing it.
// release gives back the upstream slot the response holds (it may be called
// twice): once the body is in, when the client reads slower than the
// upstream sends (spool.go).
func (h *Handler) stream(w http.ResponseWriter, r *http.Request, resp *http.Response, status cacheStatus, release func()) {
	hdr := w.Header()
	// resp has no hop-by-hop fields left (fetchFor removed them as it
	// came): removed here from the merged header, a Connection naming
	// Strict-Transport-Security or Alt-Svc took the front's own off
	// every answer passed (a review's
	// TestS73OriginsConnectionOptionsDoNotStripTheFrontsFields).
	plain := len(resp.Header[hsts]) > 0 && h.plainClient(r)
	for k, v := range resp.Header {
		if k != altSvc && (!plain || k != hsts) { // the TLS front's own stays (altSvc)
			hdr[k] = v
		}
	}
	removeEdgeHeaders(hdr)
	if inboundOf(r).Relayed {
		// A peer reads the lifetime from them as this node would have:
		// without, a page Edge-Cache-Control kept out of this node's
		// store (no-store) was kept an hour at the ingress by its
		// Cache-Control, one user's answer for everyone (a review's
		// TestS25EdgeNoStorePassedByTheHomeIsStoredAtTheIngress).
		h.keepEdgeTargeted(hdr, resp.Header)
	}
	if _, ok := hdr["Content-Type"]; !ok {
		hdr["Content-Type"] = nil // never sniff: serve what the origin said
	}
	hdr.Add("Via", h.via)
	hdr["Cache-Status"] = h.field(status)
	c := streamCoder{body: resp.Body, out: w}
	switch {
	case r.Method == http.MethodHead || h.spool == nil:
	case resp.ContentLength >= 0 && resp.ContentLength <= spoolWindow:
		// A small body is read whole first, charged to the buffer budget
		// until the client has it, and the slot given back; one that
		// broke ends the answer after what came, with its error. Over the
		// budget it streams, holding its slot until the client has read
		// it: memory, not the upstream, is what is short then.
		n := resp.ContentLength
		if !h.charge(n) {
			break
		}
		c.after = append(c.after, func() { h.release(n) })
		body, err := readWhole(resp.Body, n)
		if err == nil {
			release()
		}
		c.body = body
	default:
		body, done := h.spooled(r.Context(), resp.Body, release)
		c.body, c.after = body, append(c.after, done)
	}
	defer c.end()
	if !h.codeStream(w, r, resp, &c) {
		return
	}
	h.extendWrite(w)
	w.WriteHeader(resp.StatusCode)
	if r.Method == http.MethodHead {
		return
	}
	h.copyStream(w, r, &c)
}

// streamCoder is how a streamed body is read and written: decoded from
// body, encoded into out by ew (nil: as it comes), with what must be
// released when the stream ends.
type streamCoder struct {
	body  io.Reader
	out   io.Writer
	ew    *encodingWriter
	after []func() // run by end, last first
}

func (c *streamCoder) end() {
	for i := len(c.after) - 1; i >= 0; i-- {
		c.after[i]()
	}
}

// codeStream sets up the coding the client gets for resp's body, with the
// memory it takes charged first. It reports false when it answered the
// request itself (an error: no budget, a body it cannot decode).
func (h *Handler) codeStream(w http.ResponseWriter, r *http.Request, resp *http.Response, c *streamCoder) bool {
	hdr := w.Header()
	from, to, ok := h.streamCoding(r, resp.StatusCode, resp.Header)
	if !ok {
		if h.wholeCodable(resp.StatusCode, resp.Header) {
			// A relayed 304 or 206 carries the Vary its 200 would (RFC
			// 9110 §15.4.5, §15.3.7): a downstream cache freshening its
			// gzip answer from the 304 lost Accept-Encoding from its
			// Vary (a review's
			// TestS65PassedConditionalAnswersKeepVaryAcceptEncoding).
			addVaryAcceptEncoding(hdr)
		}
		return true
	}
	addVaryAcceptEncoding(hdr)
	if to != from && r.Method != http.MethodHead {
		if from != coding.Identity {
			// A decoder's window, as the stream declares it in its first
			// bytes, is charged before it is allocated.
			head := make([]byte, 32)
			n, rerr := io.ReadFull(c.body, head)
			head = head[:n]
			if n == 0 && rerr == io.EOF {
				// An empty body labelled with a coding: nothing to decode
				// (a decoder fails on it, and a 302 became a 502: a
				// review); sent as the empty identity body it is.
				setCodingFields(hdr, coding.Identity, -1, true, h.formTag(coding.Identity))
				h.metrics.compression.served[coding.Identity].Inc()
				return true
			}
			// The whole body when it ended within the head; a stored body is
			// charged frame by frame instead (DecodeCharged).
			state := coding.StreamDecoderBytes(from, head, n < len(head))
			if !h.charge(state) {
				h.metrics.compression.overBudget[opDecode].Inc()
				clear(hdr) // the origin's fields describe a body this answer does not carry
				w.Header().Set("Retry-After", "1")
				h.writeError(w, http.StatusServiceUnavailable, refused("miss", string(whyBufferFull)), "too much in flight")
				return false
			}
			c.after = append(c.after, func() { h.release(state) })
			dec, err := h.cfg.Compression.Codec.NewReader(from, io.MultiReader(bytes.NewReader(head), c.body), h.cfg.Compression.MaxDecodedBytes)
			if err != nil {
				clear(hdr)
				h.writeError(w, http.StatusBadGateway, refused("miss", "undecodable"), "the origin sent a body that cannot be decoded")
				return false
			}
			c.after = append(c.after, func() { dec.Close() })
			c.body = &countingReader{r: dec, n: h.metrics.compression.out[opDecode][from]}
		} else if ew, err := h.newEncodingWriter(w, to); errors.Is(err, coding.ErrBudget) {
			to = from // no memory for an encoder: identity, Vary kept
		} else if err != nil {
			clear(hdr)
			h.writeError(w, http.StatusInternalServerError, refused("miss", "encoder"), "encoder unavailable")
			return false
		} else {
			c.after = append(c.after, func() { _ = ew.Close() }) // idempotent; gives the encoder back on every path
			c.out, c.ew = ew, ew
		}
	}
	if to != from {
		setCodingFields(hdr, to, -1, true, h.formTag(to))
	}
	h.metrics.compression.served[to].Inc()
	return true
}

// copyStream copies a streamed body to the client as it comes, flushing
// whenever the upstream pauses. A body that breaks ends the connection,
// so that the client cannot take a truncated body for a whole one.
func (h *Handler) copyStream(w http.ResponseWriter, r *http.Request, c *streamCoder) {
	bp := h.bufPool.Get().(*[]byte)
	defer h.bufPool.Put(bp)
	rc := http.NewResponseController(w)
	buf := *bp
	for {
		n, err := c.body.Read(buf)
		if n > 0 {
			h.extendWrite(w)
			if _, werr := c.out.Write(buf[:n]); werr != nil {
				return
			}
			if n < len(buf) {
				if c.ew != nil {
					_ = c.ew.Flush()
				}
				_ = rc.Flush() // the upstream paused: pass on what we have
			}
		}
		if errors.Is(err, io.EOF) {
			if c.ew != nil && c.ew.Close() != nil {
				panic(http.ErrAbortHandler)
			}
			return
		}
		if err != nil {
			if errors.Is(err, coding.ErrTooLarge) {
				h.metrics.compression.bombs.Inc()
			}
			h.log.Debug("streaming response", "err", err)
			if c.ew != nil {
				c.ew.abort() // no end-of-stream block: the body must not decode as whole
			}
			if r.Context().Err() == nil {
				panic(http.ErrAbortHandler)
			}
			return
		}
	}
}

// countingReader counts the bytes read through it (here: decoded output).
type countingReader struct {
	r io.Reader
	n interface{ Add(float64) }
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n.Add(float64(n))
	return n, err
}

// writeUpstreamError answers a client when the upstream failed.
func (h *Handler) writeUpstreamError(w http.ResponseWriter, err error) {
	code := http.StatusBadGateway
	detail := "upstream-error"
	var ne net.Error
	if errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout()) {
		code, detail = http.StatusGatewayTimeout, "upstream-timeout"
	}
	if errors.Is(err, context.Canceled) {
		detail = "client-gone"
	}
	if errors.Is(err, errOverload) {
		code, detail = http.StatusServiceUnavailable, "overload"
	}
	h.writeError(w, code, refused("miss", detail), fmt.Sprintf("%d %s", code, http.StatusText(code)))
}

// writeError answers with a short text error that still carries our
// Cache-Status and Via, so a client can tell which node refused it and why.
func (h *Handler) writeError(w http.ResponseWriter, code int, status cacheStatus, msg string) {
	w.Header()["Cache-Status"] = h.field(status)
	w.Header().Set("Via", h.via)
	w.Header().Set("Cache-Control", "no-store")
	h.extendWrite(w)
	http.Error(w, msg, code)
}

// ageValues holds the Age field values of the first hour, so the hit path
// does not allocate for them. The slices are shared: nothing may modify them.
var ageValues = func() [3600][]string {
	var a [3600][]string
	for i := range a {
		a[i] = []string{strconv.Itoa(i)}
	}
	return a
}()

func ageValue(d time.Duration) []string {
	s := int64(d / time.Second)
	if s < 0 {
		s = 0
	}
	if s < int64(len(ageValues)) {
		return ageValues[s]
	}
	return []string{strconv.FormatInt(s, 10)}
}

// viaFor returns the Via field of a response served from e: the stored Via
// elements followed by ours, computed once per entry.
func (h *Handler) viaFor(e *Entry) []string {
	if v := e.via.Load(); v != nil {
		return *v
	}
	var v []string
	if vs := e.Header["Via"]; len(vs) > 0 {
		v = append(vs[:len(vs):len(vs)], h.via)
	} else {
		v = h.viaOnly
	}
	e.via.Store(&v)
	return v
}
