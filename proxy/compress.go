package proxy

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/edgecache/edge/coding"
)

// This file owns content codings at the edge (compression.* in the
// config). The rules:
//   - With compression on, every request the edge forwards says
//     Accept-Encoding: identity, so one origin fetch serves every client
//     whatever codings it accepts, and Accept-Encoding cannot split the
//     cache into variants (its forwarded value is the same for everyone).
//   - The store keeps the body as the origin sent it (identity, unless the
//     origin compresses regardless). Other codings are derived
//     representations of the same entry, made on first use, charged to the
//     store's byte budget with it and dropped with it (eviction, purge,
//     replacement).
//   - Each derived form is a complete response of its own: Content-Encoding,
//     Content-Length and an ETag with a coding suffix, so conditional
//     requests and ranges apply to the encoded bytes (RFC 9110 §8.8.3,
//     §14.1.1). Every response that could be encoded carries
//     Vary: Accept-Encoding.
//   - A body the origin encoded in a coding the client does not accept is
//     decoded, bounded by MaxDecodedBytes (a decompression bomb gets 502).
//   - Cache-Control: no-transform (RFC 9111 §5.2.2.6) is obeyed.

// Compression configures content codings. A nil *Compression in Config
// passes every body on as the origin sent it.
type Compression struct {
	Codec *coding.Codec // stored forms and decoding
	// Stream encodes responses as they stream, paid per request (nil: Codec).
	Stream *coding.Codec
	// Offer are the codings produced (br, zstd, gzip), plus identity.
	Offer coding.Set
	// Types are the media types compressed.
	Types coding.Types
	// MinBytes is the smallest body compressed; below about a packet the
	// saving is lost in framing.
	MinBytes int64
	// MaxDecodedBytes bounds decoding of a body the origin encoded.
	MaxDecodedBytes int64
	// FormWorkers is how many stored forms are made at once, in the
	// background (0: FormWorkersDefault).
	FormWorkers int
	// LiveEncoders is how many responses are encoded live at once
	// (stored entries whose form is not made yet); past it they go in
	// identity (0: LiveEncodersDefault).
	LiveEncoders int
}

// FormWorkersDefault is half the cores (at least one): stored forms, at
// the stored levels' cost, never take more than that from the requests.
func FormWorkersDefault() int { return max(1, runtime.GOMAXPROCS(0)/2) }

// LiveEncodersDefault is four per core: enough to keep every core
// encoding while some of the writes wait on slow clients; more would only
// queue CPU work behind the requests.
func LiveEncodersDefault() int { return 4 * runtime.GOMAXPROCS(0) }

// slots returns how many form workers and live encoders c allows.
func (c *Compression) slots() (forms, live int) {
	forms, live = FormWorkersDefault(), LiveEncodersDefault()
	if c != nil && c.FormWorkers > 0 {
		forms = c.FormWorkers
	}
	if c != nil && c.LiveEncoders > 0 {
		live = c.LiveEncoders
	}
	return forms, live
}

// acceptIdentity is the Accept-Encoding the edge forwards with compression on.
var acceptIdentity = []string{"identity"}

// formSet holds an entry's derived representations, one per coding.
type formSet struct {
	mu    [coding.Count]sync.Mutex // serialises making one form, so a crowd compresses once
	forms [coding.Count]atomic.Pointer[Entry]
	// larger marks codings whose encoding of the identity body came out no
	// smaller than it (random or already-compressed bytes): identity is
	// served instead, with the entry's Vary: Accept-Encoding kept.
	larger [coding.Count]atomic.Bool
	// pending marks codings whose form is being made in the background.
	pending [coding.Count]atomic.Bool
	// tooLarge marks codings whose form decoding the body exceeded
	// compression.max_decoded_bytes (a decompression bomb): the same body
	// decodes the same way, so the next request is refused at once rather
	// than decoding up to the limit again (a review measured 7.5 ms of CPU
	// per request otherwise).
	tooLarge [coding.Count]atomic.Bool
}

// classify decides in which codings e may be served: e.offers stays 0 for
// a response that is passed on as stored. It marks the stored header with
// Vary: Accept-Encoding when the response could be encoded.
func (h *Handler) classify(e *Entry) {
	c := h.cfg.Compression
	if c == nil {
		return
	}
	enc, known, ok := h.codable(e.Status, e.Header)
	if !ok {
		return
	}
	e.coding = enc
	if enc == coding.Identity {
		if !known {
			return
		}
		e.offers = c.Offer
	} else {
		e.offers = coding.Set(0).With(coding.Identity).With(enc)
	}
	addVaryAcceptEncoding(e.Header)
}

// codable reports whether a response with status and header may be served
// in another coding than it has (ok), the coding its body has, and whether
// its identity body is worth compressing (eligible type and size).
//
// Only 200s are compressed. A body of another status that the origin
// encoded anyway (nginx gzips its error pages) is decoded for a client
// that does not take its coding, as a 200's is: served as stored, a
// cacheable 404 in gzip reached every client, those that refused gzip
// included. Statuses without a body (204, 304) and partial ones (206,
// Content-Range) are passed as they are.
func (h *Handler) codable(status int, hdr http.Header) (enc coding.Encoding, compress, ok bool) {
	c := h.cfg.Compression
	if c == nil || status < 200 || status == http.StatusNoContent || status == http.StatusPartialContent ||
		status == http.StatusNotModified || len(hdr["Content-Range"]) > 0 {
		return 0, false, false
	}
	if ParseCacheControl(hdr, "Cache-Control").NoTransform {
		return 0, false, false
	}
	enc, ok = coding.OfBody(hdr["Content-Encoding"])
	if !ok {
		return 0, false, false
	}
	if enc != coding.Identity {
		return enc, false, true
	}
	if status != http.StatusOK {
		return enc, false, false
	}
	if !c.Types.Match(hdr.Get("Content-Type")) {
		return enc, false, false
	}
	if cl := hdr.Get("Content-Length"); cl != "" {
		if n, err := strconv.ParseInt(cl, 10, 64); err == nil && n < c.MinBytes {
			return enc, false, false
		}
	}
	return enc, true, true
}

// addVaryAcceptEncoding lists Accept-Encoding in hdr's Vary unless it is
// there already.
func addVaryAcceptEncoding(hdr http.Header) {
	for _, v := range hdr["Vary"] {
		if containsToken(v, "accept-encoding") || containsToken(v, "*") {
			return
		}
	}
	hdr["Vary"] = append(hdr["Vary"][:len(hdr["Vary"]):len(hdr["Vary"])], "Accept-Encoding")
}

// errBomb is a body whose decoding exceeded compression.max_decoded_bytes.
var errBomb = errors.New("proxy: decoded body exceeds compression.max_decoded_bytes")

// represent returns the representation of e to send for r: e itself, or a
// derived form in the coding r's Accept-Encoding prefers; or, when that
// form is an encoding not made yet, e with live set to the coding to
// encode it in as it is written, at the stream level (encodeLive), while
// the stored form is made in the background (makeFormLater).
func (h *Handler) represent(r *http.Request, e *Entry) (d *Entry, live coding.Encoding, err error) {
	d, live, err = h.chooseForm(r.Header["Accept-Encoding"], e, needsServeContent(r))
	if err == nil && e.offers != 0 && live == coding.Identity {
		h.metrics.compression.served[d.coding].Inc() // a live answer is counted by encodeLive, which may fall back
	}
	return d, live, err
}

// chooseForm is represent for a client that sent accept as its
// Accept-Encoding values, without counting what was served. partial says
// the request has a Range or a conditional, answered from a whole body.
//
// Stored forms are made at the stored levels, which cost several times
// the stream levels' CPU (docs/benchmarks.md), and only for entries read
// again: the first reader of a miss gets the leader's stream, and the
// first hit that wants a form asks for it in the background, bounded by
// compression's form slots, and is answered live at the stream level, or
// in identity (RFC 9110 §12.5.3 lets a server send it whatever was asked)
// when too many live encodings run already. A partial request needs the
// stored form's exact bytes (a range of a live encoding would not continue
// any other response), so it waits for the form, as does decoding an
// origin-encoded body, which is cheap.
func (h *Handler) chooseForm(accept []string, e *Entry, partial bool) (d *Entry, live coding.Encoding, err error) {
	enc, transcode := h.codingFor(accept, e)
	if !transcode {
		return e, coding.Identity, nil
	}
	if e.coding == coding.Identity {
		if fs := e.forms.Load(); fs != nil {
			if d := fs.made(e, enc); d != nil {
				return d, coding.Identity, nil
			}
		}
		if !partial {
			if !e.fromDisk && h.store.holds(e) {
				// A form of an entry the store does not hold (a disk hit,
				// an unshared or evicted answer) would be made and thrown
				// away, again on every hit.
				h.makeFormLater(e, enc)
			}
			if h.takeLiveSlot() {
				// Live, in the cheapest coding the client takes (the
				// stored form is in the smallest).
				return e, coding.NegotiateStream(accept, e.offers), nil
			}
			h.metrics.compression.identityNow.Inc()
			return e, coding.Identity, nil
		}
	}
	d, err = h.form(e, enc)
	if errors.Is(err, coding.ErrBudget) && e.coding == coding.Identity {
		// No memory to encode now: identity, which RFC 9110 §12.5.3 lets a
		// server send whatever the client asked, with Vary kept.
		return e, coding.Identity, nil
	}
	return d, coding.Identity, err
}

// formsOf returns e's form set, made on first use.
func (e *Entry) formsOf() *formSet {
	fs := e.forms.Load()
	if fs == nil {
		e.forms.CompareAndSwap(nil, &formSet{})
		fs = e.forms.Load()
	}
	return fs
}

// makeFormLater makes e's stored form in enc in the background, unless
// one is being made or every form slot is busy (then a later hit asks
// again): at most cap(formSlots) stored forms are made at once, so making
// them never takes more than that many cores from the requests.
func (h *Handler) makeFormLater(e *Entry, enc coding.Encoding) {
	fs := e.formsOf()
	if !fs.pending[enc].CompareAndSwap(false, true) {
		return
	}
	select {
	case h.formSlots <- struct{}{}:
	default:
		fs.pending[enc].Store(false)
		h.metrics.compression.formsDeferred.Inc()
		return
	}
	h.bg.Go(func() {
		defer func() {
			<-h.formSlots
			fs.pending[enc].Store(false)
		}()
		d, err := h.form(e, enc)
		if err == nil && d.transient {
			// e left the store meanwhile: the form is nobody's.
			h.releaseTransient(d)
		}
	})
}

// takeLiveSlot reserves one of the live encodings a node runs at once
// (giveLiveSlot returns it); false when all are in use: the CPU is busy
// enough, and the response goes in identity rather than queueing.
func (h *Handler) takeLiveSlot() bool {
	select {
	case h.liveSlots <- struct{}{}:
		return true
	default:
		return false
	}
}

func (h *Handler) giveLiveSlot() { <-h.liveSlots }

// codingFor is the coding accept selects for e, and whether sending it
// takes a form other than e (not for an entry served as stored, the
// coding e already has, or an identity body too small to compress).
func (h *Handler) codingFor(accept []string, e *Entry) (enc coding.Encoding, transcode bool) {
	if e.offers == 0 {
		return e.coding, false
	}
	enc = coding.Negotiate(accept, e.offers)
	if enc == e.coding || (e.coding == coding.Identity && int64(len(e.Body)) < h.cfg.Compression.MinBytes) {
		return enc, false
	}
	return enc, true
}

// madeForm is chooseForm for the HTTP/1.1 hit path, given the coding
// decideHit chose: it never encodes or decodes (that work, and its memory,
// is ServeHTTP's), so ok is false when the form is not made yet or would
// be made per response.
func (h *Handler) madeForm(e *Entry, enc coding.Encoding, transcode bool) (d *Entry, ok bool) {
	if !transcode {
		return e, true
	}
	if fs := e.forms.Load(); fs != nil {
		if d := fs.made(e, enc); d != nil {
			return d, true
		}
	}
	return nil, false
}

// made returns e's form in enc if it is made (e itself when encoding in
// enc saved nothing), else nil.
func (fs *formSet) made(e *Entry, enc coding.Encoding) *Entry {
	if d := fs.forms[enc].Load(); d != nil {
		return d
	}
	if fs.larger[enc].Load() {
		return e
	}
	return nil
}

// form returns e's representation in enc, making it on first use.
func (h *Handler) form(e *Entry, enc coding.Encoding) (*Entry, error) {
	fs := e.formsOf()
	if d := fs.made(e, enc); d != nil {
		return d, nil
	}
	if fs.tooLarge[enc].Load() {
		return nil, errBomb
	}
	fs.mu[enc].Lock()
	defer fs.mu[enc].Unlock()
	if d := fs.made(e, enc); d != nil {
		return d, nil
	}
	if fs.tooLarge[enc].Load() {
		return nil, errBomb
	}
	// The body is charged to the buffer budget before it is allocated, and
	// stays charged (len(body)) until it is kept or written.
	body, err := h.transcode(e.coding, enc, e.Body)
	if errors.Is(err, errBomb) {
		fs.tooLarge[enc].Store(true) // counted once, in edge_compression_bombs_total
	}
	if err != nil {
		return nil, err
	}
	if e.coding == coding.Identity && len(body) >= len(e.Body) {
		// Encoding saved nothing: every client that accepts identity gets
		// it, and no one pays for a form that is larger.
		h.release(int64(len(body)))
		fs.larger[enc].Store(true)
		h.metrics.compression.larger[enc].Inc()
		return e, nil
	}
	d := e.derive(enc, body, h.formTag(enc))
	if d.size > h.cfg.MaxObjectBytes {
		// Larger than we keep (a big body the origin encoded, decoded for
		// a client that does not accept its coding): made per request, its
		// body charged to the buffer budget until releaseTransient after
		// it is written.
		d.transient = true
		return d, nil
	}
	if !h.store.chargeForm(e, d.size) {
		// e is not in the store: the form is made for this response
		// alone and stays on the buffer budget until it is written.
		d.transient = true
		return d, nil
	}
	h.release(int64(len(body))) // now on the store's budget
	fs.forms[enc].Store(d)
	e.formBytes.Add(d.size)
	return d, nil
}

// transcode turns a whole body from one coding into another: encode an
// identity body, or decode an encoded one (bounded). Coder state and
// output are charged to the buffer budget before they are allocated; the
// returned body stays charged (its length), and over the budget it
// returns coding.ErrBudget with nothing allocated or charged.
func (h *Handler) transcode(from, to coding.Encoding, body []byte) ([]byte, error) {
	c := h.cfg.Compression
	m := &h.metrics.compression
	budget := bufferBudget{h}
	start := time.Now()
	if from != coding.Identity && len(body) == 0 {
		// An empty body labelled with a coding (a redirect or an error
		// page some origins send so): no coded stream to decode, which
		// would fail and turn a 302 into a 502 (a review), but nothing.
		if to == coding.Identity {
			return []byte{}, nil // charged: its length, 0
		}
		from = coding.Identity
	}
	if from != coding.Identity {
		out, err := c.Codec.DecodeCharged(from, body, c.MaxDecodedBytes, budget)
		m.seconds[opDecode][from].Add(time.Since(start).Seconds())
		switch {
		case errors.Is(err, coding.ErrTooLarge):
			m.bombs.Inc()
			return nil, errBomb
		case errors.Is(err, coding.ErrBudget):
			m.overBudget[opDecode].Inc()
			return nil, err
		case err != nil:
			m.errors.Inc()
			return nil, err
		}
		m.in[opDecode][from].Add(float64(len(body)))
		m.out[opDecode][from].Add(float64(len(out)))
		if to == coding.Identity {
			return out, nil
		}
		defer h.release(int64(len(out))) // the identity body, once encoded
		body, start = out, time.Now()
	}
	out, err := c.Codec.EncodeCharged(to, body, budget)
	if errors.Is(err, coding.ErrBudget) {
		m.overBudget[opEncode].Inc()
		return nil, err
	}
	if err != nil {
		m.errors.Inc()
		return nil, err
	}
	m.seconds[opEncode][to].Add(time.Since(start).Seconds())
	m.in[opEncode][to].Add(float64(len(body)))
	m.out[opEncode][to].Add(float64(len(out)))
	return out, nil
}

// formTag is the entity-tag suffix of a body in coding enc: the stored
// forms' codec's (coding.Codec.FormTag), for stored and streamed bodies
// alike (setCodingFields).
func (h *Handler) formTag(enc coding.Encoding) string {
	if c := h.cfg.Compression; c != nil && c.Codec != nil {
		return c.Codec.FormTag(enc)
	}
	return enc.String()
}

// bufferBudget is limits.max_buffered_bytes as a coding.Budget.
type bufferBudget struct{ h *Handler }

func (b bufferBudget) Charge(n int64) bool { return b.h.charge(n) }
func (b bufferBudget) Release(n int64)     { b.h.release(n) }

// releaseTransient gives back the charge a transient form's body holds
// (form), once it is written.
func (h *Handler) releaseTransient(d *Entry) { h.release(int64(len(d.Body))) }

// derive returns e in coding enc with body: same freshness, its own
// framing fields and validator (its tag suffixed with form, formTag's).
func (e *Entry) derive(enc coding.Encoding, body []byte, form string) *Entry {
	hdr := e.Header.Clone()
	setCodingFields(hdr, enc, int64(len(body)), false, form)
	d := e.sibling(hdr, body)
	d.etag, d.coding = hdr.Get("Etag"), enc
	d.computeSize()
	d.size -= int64(len(d.surrogates)) * tagOverhead // a form is not in the tag index: its base is
	return d
}

// setCodingFields rewrites the fields that describe a body for the same
// response in coding enc: Content-Encoding, Content-Length (unknown: -1)
// and the ETag, which gets the suffix form (formTag: the coding and its
// level) because each coding is a different representation with its own
// bytes (RFC 9110 §8.8.3). A body encoded as it streams (weak) gets a weak
// tag: its bytes depend on where the upstream paused and on the stream's
// faster level, so they differ from the stored form's, and a strong tag
// would let If-Range splice the two. Its suffix is still the stored
// form's, so that a client revalidating what it got from the stream
// (If-None-Match, weak comparison) gets a 304 from the stored form.
func setCodingFields(hdr http.Header, enc coding.Encoding, length int64, weak bool, form string) {
	if enc == coding.Identity {
		delete(hdr, "Content-Encoding")
	} else {
		hdr["Content-Encoding"] = []string{enc.String()}
	}
	if length >= 0 {
		hdr["Content-Length"] = []string{strconv.FormatInt(length, 10)}
	} else {
		delete(hdr, "Content-Length")
	}
	if tag := hdr.Get("Etag"); tag != "" {
		tag = etagFor(tag, form)
		if weak && enc != coding.Identity && !strings.HasPrefix(tag, "W/") && tag != "" {
			tag = "W/" + tag
		}
		if tag == "" {
			delete(hdr, "Etag")
		} else {
			hdr["Etag"] = []string{tag}
		}
	}
	// Digests of the other bytes (RFC 9530's Content-Digest and
	// Repr-Digest are of the content as sent or of the representation,
	// and both change with the coding).
	for _, k := range [...]string{"Content-Md5", "Content-Digest", "Repr-Digest", "Digest"} {
		delete(hdr, k)
	}
}

// etagFor appends "-form" (formTag's) inside an entity-tag's quotes, keeping it weak
// or strong. A malformed tag is dropped rather than reused for other bytes.
func etagFor(tag, form string) string {
	weak := strings.HasPrefix(tag, "W/")
	opaque := strings.TrimPrefix(tag, "W/")
	if len(opaque) < 2 || opaque[0] != '"' || opaque[len(opaque)-1] != '"' {
		return ""
	}
	out := opaque[:len(opaque)-1] + "-" + form + `"`
	if weak {
		return "W/" + out
	}
	return out
}

// streamCoding decides how a response streamed from upstream (a fill being
// read as it arrives, or a pass) is sent to r: from its body's coding to
// the one r gets. ok is false for a response that is passed on as it is.
func (h *Handler) streamCoding(r *http.Request, status int, hdr http.Header) (from, to coding.Encoding, ok bool) {
	enc, compress, ok := h.codable(status, hdr)
	if !ok {
		return enc, enc, false
	}
	if compress {
		// Encoded as it is sent: the cheapest coder the client takes.
		return enc, coding.NegotiateStream(r.Header["Accept-Encoding"], h.cfg.Compression.Offer), true
	}
	return enc, coding.Negotiate(r.Header["Accept-Encoding"], coding.Set(0).With(coding.Identity).With(enc)), true
}

// encodingWriter compresses a stream to a client. The encoder writes into
// a buffer that is passed on after each step, so the time it records is
// the encoder's, not the client's.
type encodingWriter struct {
	h       *Handler
	w       io.Writer
	enc     coding.Encoding
	cw      coding.Writer
	buf     bytes.Buffer
	err     error
	closed  bool
	charged int64 // the encoder's state, held on the buffer budget until Close
}

// newEncodingWriter returns an encoder of enc writing to w, its state
// charged to the buffer budget until Close. Over the budget it returns
// coding.ErrBudget: the caller sends identity instead, having allocated
// nothing.
func (h *Handler) newEncodingWriter(w io.Writer, enc coding.Encoding) (*encodingWriter, error) {
	codec := h.cfg.Compression.Stream
	if codec == nil {
		codec = h.cfg.Compression.Codec
	}
	state := codec.EncoderBytes(enc)
	if !h.charge(state) {
		h.metrics.compression.overBudget[opEncode].Inc()
		return nil, coding.ErrBudget
	}
	ew := &encodingWriter{h: h, w: w, enc: enc, charged: state}
	cw, err := codec.NewWriter(enc, &ew.buf)
	if err != nil {
		h.release(state)
		return nil, err
	}
	ew.cw = cw
	return ew, nil
}

// step runs one encoder call, then passes its output on.
func (ew *encodingWriter) step(in int, f func() error) error {
	if ew.err != nil {
		return ew.err
	}
	m := &ew.h.metrics.compression
	start := time.Now()
	err := f()
	m.seconds[opStream][ew.enc].Add(time.Since(start).Seconds())
	m.in[opStream][ew.enc].Add(float64(in))
	if err == nil && ew.buf.Len() > 0 {
		m.out[opStream][ew.enc].Add(float64(ew.buf.Len()))
		_, err = ew.w.Write(ew.buf.Bytes())
		ew.buf.Reset()
	}
	ew.err = err
	return err
}

func (ew *encodingWriter) Write(p []byte) (int, error) {
	if err := ew.step(len(p), func() error { _, err := ew.cw.Write(p); return err }); err != nil {
		return 0, err
	}
	return len(p), nil
}

// Flush emits what was written so far, so a paused upstream does not leave
// the client waiting on bytes in the encoder.
func (ew *encodingWriter) Flush() error { return ew.step(0, ew.cw.Flush) }

// abort makes Close give the encoder back without ending the stream, so a
// body cut short upstream never arrives as a complete, decodable one.
func (ew *encodingWriter) abort() {
	if ew.err == nil {
		ew.err = errAborted
	}
}

var errAborted = errors.New("proxy: encoded stream aborted")

// Close ends the stream (or, after abort, only gives the encoder back). It
// must be called on every path; calls after the first do nothing.
func (ew *encodingWriter) Close() error {
	if ew.closed {
		return ew.err
	}
	ew.closed = true
	defer ew.h.release(ew.charged)
	if ew.err != nil {
		_ = ew.cw.Close()
		return ew.err
	}
	return ew.step(0, ew.cw.Close)
}

// needsEncode reports whether r must get e's identity body encoded. A
// request that joins a fill (not its leader) then waits for the whole body
// and gets the stored form, made once: a crowd of collapsed requests
// encoding the stream each would cost a compression per request.
func (h *Handler) needsEncode(r *http.Request, e *Entry) bool {
	return e.offers != 0 && e.coding == coding.Identity && coding.Negotiate(r.Header["Accept-Encoding"], e.offers) != coding.Identity
}

// needsDecode reports whether r must get e's encoded body decoded, which
// is done on the whole body (a fill is waited for, not streamed).
func (h *Handler) needsDecode(r *http.Request, e *Entry) bool {
	return e.offers != 0 && e.coding != coding.Identity && coding.Negotiate(r.Header["Accept-Encoding"], e.offers) != e.coding
}

// matchesOnlyWeakly reports whether an If-None-Match field lists the
// strong tag only in its weak spelling, W/ before the same opaque tag: not
// the strong tag itself, nor "*". It reads the field as http.ServeContent,
// which decides the answer, reads it: the first line alone, as far as it
// parses as a list of entity-tags.
func matchesOnlyWeakly(line, tag string) bool {
	weak := false
	for rest := line; ; {
		rest = strings.TrimLeft(rest, " \t,")
		if rest == "" {
			return weak
		}
		if rest[0] == '*' {
			return false
		}
		isWeak := strings.HasPrefix(rest, "W/")
		opaque := strings.TrimPrefix(rest, "W/")
		end := -1
		if len(opaque) >= 2 && opaque[0] == '"' {
			end = strings.IndexFunc(opaque[1:], func(c rune) bool { return c == '"' || !etagChar(c) })
		}
		if end < 0 || opaque[end+1] != '"' {
			return weak
		}
		switch got := opaque[:end+2]; {
		case got != tag:
		case isWeak:
			weak = true
		default:
			return false
		}
		rest = opaque[end+2:]
	}
}

// etagChar reports whether c may stand inside an entity-tag's quotes
// (RFC 9110 §8.8.3's etagc, obs-text included).
func etagChar(c rune) bool { return c == 0x21 || c >= 0x23 && c != 0x7f }

// strongTag reports whether an If-Range value is a strong entity-tag (not
// a date, not weak).
func strongTag(v string) bool {
	v = strings.TrimSpace(v)
	return len(v) >= 2 && v[0] == '"' && v[len(v)-1] == '"'
}
