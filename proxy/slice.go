package proxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/edgecache/edge/coding"
)

// Large objects in slices, as nginx's slice module and Varnish's slicer
// keep them. A response larger than SliceBytes (200, whole, not encoded,
// not varying, with a validator that names its bytes) is stored as a
// manifest (its header fields, no body) under its URL key, and its body as
// slices of SliceBytes under keys of their own, each an ordinary entry:
// stored in RAM or on disk, evicted, purged and revalidated like any
// other. The response that revealed the size fills the first slices as it
// streams; every other slice is fetched with a Range request when a client
// first needs it, once however many clients need it at once. A Range
// request for a 64 MiB object therefore costs the origin the slices that
// cover it, not the object.
//
// Each slice keeps the validators of the response it came from, and is
// used only while they equal the manifest's: an object that changed at the
// origin between two slices is never spliced from both versions. An origin
// that answers a Range request with 200 does not support ranges: the
// manifest is dropped, the key is marked large (streamed through from then
// on) and the request in hand is forwarded whole.

// sliceSizeField marks a manifest and carries the object's size and the
// slice size it was cut in ("total/slice"), so that a change of
// cache.slice_bytes never reads old slices at new offsets. It is removed
// from every upstream response (an origin cannot forge a manifest) and
// never sent to clients.
const sliceSizeField = "Edge-Slice-Size"

// sliceOfField marks a slice with the manifest cut it belongs to (its
// sliceSizeField value, "total/slice"): a slice is stored by its index,
// so after a change of cache.slice_bytes, or an origin that kept its
// ETag across a change of length, a new manifest found the old cut's
// slice of the same index and length and sent bytes from another offset
// (a review's TestS67NewManifestAfterASliceSizeChangeReadsAnOldSlice).
// Like sliceSizeField it is removed from every upstream response and
// never sent (clients get the manifest's fields); a slice stored before
// it existed is fetched again.
const sliceOfField = "Edge-Slice-Of"

// sliceKey is the store key of slice k of the object stored under key.
func sliceKey(key string, k int64) string { return key + "\x00slice=" + strconv.FormatInt(k, 10) }

// parseSliceTotal is the object size and slice size a manifest's header
// gives, or zeros for an entry that is not a manifest.
func parseSliceTotal(hdr http.Header) (total, slice int64) {
	v, ok := hdr[sliceSizeField]
	if !ok || len(v) != 1 {
		return 0, 0
	}
	ts, ss, _ := strings.Cut(v[0], "/")
	total, err1 := strconv.ParseInt(ts, 10, 64)
	slice, err2 := strconv.ParseInt(ss, 10, 64)
	if err1 != nil || err2 != nil || total <= 0 || slice <= 0 {
		return 0, 0
	}
	return total, slice
}

// sliceSize is the object size a manifest describes, or 0 for an entry
// that is not a manifest.
func (e *Entry) sliceSize() int64 { return e.sliceTotal }

// manifestFor returns the manifest for a response that should be sliced
// (storable, shareable with r, and sliceable), or nil.
func (h *Handler) manifestFor(r *http.Request, m miss, resp *http.Response, reqTime, respTime time.Time) *Entry {
	e := h.newEntry(m.key, resp, reqTime, respTime, m.ruling.lifetime(resp.StatusCode))
	e.VaryKey = h.varyKey(e.VaryNames, r)
	if h.shareable(e, r, m) != "" || !h.sliceable(resp, e) {
		return nil
	}
	return manifestOf(e, resp.ContentLength, h.cfg.SliceBytes)
}

// sliceable reports whether a storable 200 response with entry e should be
// sliced rather than stored whole.
func (h *Handler) sliceable(resp *http.Response, e *Entry) bool {
	s := h.cfg.SliceBytes
	if s <= 0 || resp.StatusCode != http.StatusOK || resp.ContentLength <= s {
		return false
	}
	if len(e.VaryNames) > 0 || len(resp.Header["Content-Range"]) > 0 {
		return false
	}
	if enc, ok := coding.OfBody(resp.Header["Content-Encoding"]); !ok || enc != coding.Identity {
		// Encoded bytes differ per encoding run, so ranges of them do not
		// splice, and slices are never decoded for a client that does not
		// take the coding. Every field line counts (coding.OfBody, as
		// classify reads them): "identity" on one line and "gzip" on
		// another was sliced, and sent in gzip to identity clients.
		return false
	}
	if e.offers != 0 && resp.ContentLength <= h.cfg.MaxObjectBytes {
		return false // compressible and small enough to keep whole: compressed at the edge
	}
	return strongTag(e.etag) || e.hasLastMod && strongDate(e)
}

// strongDate reports whether e's Last-Modified is a strong validator for
// a cache: at least 60 seconds before its Date (RFC 9110 §8.8.2.2; the
// margin allows for the origin's file and Date clocks to differ), or
// before when it arrived when the origin sent no Date (which a cache
// assigns then, §6.6.1). Slices of one object are stitched by their
// validator, and a file rewritten within the second it was served has
// the same Last-Modified with other bytes (a review's
// TestS67SameSecondLastModifiedIsNoStrongValidatorForSlices).
func strongDate(e *Entry) bool {
	date, ok := parseHTTPDate(e.Header.Get("Date"))
	if !ok {
		date = e.ResponseTime
	}
	return !date.Before(e.lastMod.Add(60 * time.Second))
}

// manifestOf returns the manifest for a sliced object whose response built
// e (header only), whose size is size, cut in slices of slice bytes.
func manifestOf(e *Entry, size, slice int64) *Entry {
	hdr := e.Header.Clone()
	delete(hdr, "Content-Length")
	hdr[sliceSizeField] = []string{strconv.FormatInt(size, 10) + "/" + strconv.FormatInt(slice, 10)}
	m := e.sibling(hdr, nil)
	m.etag, m.sliceTotal, m.sliceBytes = e.etag, size, slice
	m.computeSize()
	return m
}

// sameObject reports whether slice s came from the response m describes:
// the same strong ETag, or without one the same Last-Modified (sliceable
// requires one of the two).
func sameObject(s, m *Entry) bool {
	if strongTag(m.etag) {
		return s.etag == m.etag
	}
	return m.hasLastMod && s.hasLastMod && s.lastMod.Equal(m.lastMod) && s.etag == m.etag
}

// isSlice reports whether e holds bytes a–b of the object m describes,
// cut as m cuts it.
func isSlice(e, m *Entry, a, b int64) bool {
	cut := e.Header[sliceOfField]
	return sameObject(e, m) && int64(len(e.Body)) == b-a+1 && len(cut) == 1 && cut[0] == m.Header.Get(sliceSizeField)
}

// markSlice marks e as a slice of manifest m's cut (sliceOfField).
func markSlice(e, m *Entry) {
	e.Header[sliceOfField] = []string{m.Header.Get(sliceSizeField)}
}

// sliceOf is the entry for body, the slice stored under skey of the object
// manifest m describes: the manifest's fields, without the manifest mark,
// with the mark of its cut.
func sliceOf(m *Entry, skey string, body []byte) *Entry {
	e := m.sibling(m.Header.Clone(), nil)
	delete(e.Header, sliceSizeField)
	markSlice(e, m)
	e.Key, e.etag = skey, m.etag
	return e.withBody(body)
}

// removeKey removes key from the store with the slices of its manifest.
func (h *Handler) removeKey(key string) int {
	h.forSlices(key, func(k string) { h.store.Remove(k) })
	return h.store.Remove(key)
}

// markStale soft-purges key and the slices of its manifest.
func (h *Handler) markStale(key string) int {
	h.forSlices(key, func(k string) { h.store.MarkStale(k) })
	return h.store.MarkStale(key)
}

func (h *Handler) forSlices(key string, f func(string)) {
	// The slices stored, found by key whether or not the manifest that
	// names them is still there.
	seen := map[string]bool{}
	for _, k := range h.store.KeysUnder(key) {
		seen[k] = true
		f(k)
	}
	// And those the manifest names (a slice still queued for the disk
	// is in the index too; this is a second net). A purge's look-up: no
	// promotion of a disk copy into RAM (which would be rebuilt without
	// the request's rules).
	m, _ := h.store.LookupFunc(key, func(names []string) string { return VaryKey(names, nil) }, nil, false)
	if m == nil || m.sliceSize() == 0 {
		return
	}
	n := (m.sliceSize() + m.sliceBytes - 1) / m.sliceBytes
	for k := range n {
		if sk := sliceKey(key, k); !seen[sk] {
			f(sk)
		}
	}
}

// errNoRanges: the origin answered a Range request with the whole object.
var errNoRanges = errors.New("proxy: the origin does not support Range requests")

// errChanged: a slice came from another version of the object.
var errChanged = errors.New("proxy: the object changed at the origin between slices")

// errNotShared: a slice's answer may not be shared (private, Set-Cookie, a
// Vary of its own …), so it is no piece of the shared object the manifest
// describes: the request is forwarded whole instead, and the object kept.
var errNotShared = errors.New("proxy: a slice's answer may not be shared")

// errSliceRefused: the origin answered a slice request with neither 206
// nor 200 (a 401 without the credentials slices are not sent with, a
// 5xx): the request is forwarded whole, with its own fields, and the
// object kept for the requests it answers.
var errSliceRefused = errors.New("proxy: the origin refused a slice")

// errSliceNotCached: an only-if-cached request (a peer's probe among them)
// reached a slice that is not stored. It is answered 504 as any such miss,
// never by a fetch: a probe that fetched (or joined a fetch of) a slice
// waited on flights that may climb back to the prober (a review), and a
// probe's route may not fetch at all.
var errSliceNotCached = errors.New("proxy: only-if-cached and a slice is not stored")

// errSliceForbidden is errSliceRefused with a 401 or 403: the one refusal
// a reader's credentials may turn, so the one a slice is asked again for
// with them (a 5xx or 429 is not, or every reader with credentials would
// fetch its own while the origin fails).
var errSliceForbidden = fmt.Errorf("%w (unauthorized or forbidden)", errSliceRefused)

// slicer reads a sliced object for one response, slice by slice.
type slicer struct {
	h     *Handler
	r     *http.Request
	m     *Entry // the manifest
	size  int64
	ssize int64
	// stream is the upstream response that revealed the object, read
	// for its first slices while the reads stay sequential (nil once
	// used up or abandoned); streamAt is the slice it is positioned at.
	stream   io.ReadCloser
	streamAt int64
	cur      *Entry // the slice being read
	curIdx   int64
	pos      int64
	charged  int64  // buffer budget held for cur
	fetched  int    // slices this response had to fetch
	keep     bool   // store what is fetched (the cluster's q-rule may say no)
	purges   uint64 // purges when the response started: a later one stops storing
	// cachedOnly: the request is only-if-cached; a slice not stored is
	// errSliceNotCached, never fetched.
	cachedOnly bool
	err        error
}

// Read implements io.Reader over the object.
func (s *slicer) Read(p []byte) (int, error) {
	if s.pos >= s.size {
		return 0, io.EOF
	}
	k := s.pos / s.ssize
	if s.cur == nil || s.curIdx != k {
		e, err := s.slice(k)
		if err == nil {
			err = s.setCur(e, k)
		}
		if err != nil {
			s.err = err
			return 0, err
		}
	}
	off := s.pos - k*s.ssize
	if off >= int64(len(s.cur.Body)) {
		s.err = errChanged // a slice shorter than its span: never loop on it
		return 0, s.err
	}
	n := copy(p, s.cur.Body[off:])
	s.pos += int64(n)
	return n, nil
}

// Seek implements io.Seeker for http.ServeContent.
func (s *slicer) Seek(offset int64, whence int) (int64, error) {
	switch whence {
	case io.SeekStart:
	case io.SeekCurrent:
		offset += s.pos
	case io.SeekEnd:
		offset += s.size
	}
	if offset < 0 {
		return 0, errors.New("proxy: seek before the start")
	}
	s.pos = offset
	return offset, nil
}

// setCur makes e (slice k) the one being written. Its bytes are charged
// to the buffer budget while written (a slice may have left the store
// meanwhile, or come from disk): slow readers of many sliced objects
// cannot hold more memory than the budget.
func (s *slicer) setCur(e *Entry, k int64) error {
	s.h.release(s.charged)
	s.charged = 0
	if !s.h.charge(int64(len(e.Body))) {
		return errBufferFull
	}
	s.charged = int64(len(e.Body))
	s.cur, s.curIdx = e, k
	return nil
}

// errBufferFull: the buffer budget is spent.
var errBufferFull = errors.New("proxy: buffer budget spent")

// close gives back the buffer budget and the leading stream.
func (s *slicer) close() {
	s.h.release(s.charged)
	s.charged = 0
	if s.stream != nil {
		s.stream.Close()
		s.stream = nil
	}
}

// span is slice k's byte range [a, b].
func (s *slicer) span(k int64) (a, b int64) {
	a = k * s.ssize
	return a, min(a+s.ssize, s.size) - 1
}

// slice returns slice k: stored, read from the leading stream, or fetched
// with a Range request (once for concurrent readers).
func (s *slicer) slice(k int64) (*Entry, error) {
	h := s.h
	skey := sliceKey(s.m.Key, k)
	a, b := s.span(k)
	// A stored slice is used whatever its own age: the manifest was just
	// found fresh (or revalidated), and a slice with its validator holds
	// the bytes of that very object.
	if e, _ := h.store.Lookup(skey, nil); e != nil && isSlice(e, s.m, a, b) {
		return e, nil
	}
	if s.stream != nil && s.streamAt == k {
		return s.fromStream(k, skey, a, b)
	}
	if s.stream != nil {
		s.stream.Close() // the reads left the stream's order: Range requests from here
		s.stream = nil
	}
	if s.cachedOnly {
		return nil, errSliceNotCached
	}
	s.fetched++
	w := h.waitOf(s.r, skey)
	v, _, apart, err := h.slices.do(skey, w, h.purges.Load(), func() (any, error) { return h.fetchSlice(s.r, s.m, skey, a, b, s.keep, s.purges, w) })
	if apart {
		h.metrics.FillsKeptApart.Inc()
	}
	if errors.Is(err, errSliceForbidden) && (len(s.r.Header["Authorization"]) > 0 || len(s.r.Header["Cookie"]) > 0) {
		// An object the origin serves only to a reader with credentials
		// or a cookie: asked again with them, its answer is a piece of
		// the shared object only if it says it may be shared.
		f, err := h.fetchSliceAs(s.r, s.m, skey, a, b, s.keep, s.purges, true, h.waitOf(s.r, skey))
		if err != nil {
			return nil, err
		}
		if f.shared && !isSlice(f.e, s.m, a, b) {
			return nil, errNotShared // not a piece of this object: no piece of ours
		}
		return f.entry()
	}
	if err != nil {
		return nil, err
	}
	f := v.(fetchedSlice)
	if f.shared && !isSlice(f.e, s.m, a, b) {
		// We joined a fetch made for another version of the object
		// (another manifest): fetch our own, checked against ours.
		if f, err = h.fetchSlice(s.r, s.m, skey, a, b, s.keep, s.purges, h.waitOf(s.r, skey)); err != nil {
			return nil, err
		}
	}
	return f.entry()
}

// fetchedSlice is a fetched slice, shared when the cache may store it for
// everyone (sliceShareable). One that is not cannot be sent under the
// manifest's header, which says the object is shared: errNotShared.
type fetchedSlice struct {
	e      *Entry
	shared bool
}

// entry is the slice to send under the manifest's header: errNotShared
// when it may not be shared.
func (f fetchedSlice) entry() (*Entry, error) {
	if !f.shared {
		return nil, errNotShared
	}
	return f.e, nil
}

// fromStream reads slice k from the response that revealed the object.
func (s *slicer) fromStream(k int64, skey string, a, b int64) (*Entry, error) {
	h := s.h
	ran := false
	// Reading on from a response whose header is in waits on no peer's
	// header: a flight of it stands as direct (waitorder.go).
	w := h.orderOf(s.r)
	w.direct = true
	// The flight dates from the stream's fill (s.purges), not from now: a
	// request after a purge that names the page must not join it (a
	// review's TestAStreamSliceFlightBegunAfterAPurgeIsNotJoined).
	v, _, _, err := h.slices.do(skey, w, s.purges, func() (any, error) {
		ran = true
		body := make([]byte, b-a+1)
		if _, err := io.ReadFull(s.stream, body); err != nil {
			return nil, fmt.Errorf("proxy: reading slice %d from the origin: %w", k, err)
		}
		e := sliceOf(s.m, skey, body)
		if s.keep {
			h.storeSlice(e, s.purges)
		}
		// The same type as fetchSlice's: a Range fetch of this slice may
		// join this flight, and this one a Range fetch's.
		return fetchedSlice{e: e, shared: true}, nil
	})
	if err == nil && !ran {
		if f := v.(fetchedSlice); !f.shared || !isSlice(f.e, s.m, a, b) {
			// Another version's slice (see slice): fetch ours.
			s.stream.Close()
			s.stream = nil
			s.fetched++
			f, err := h.fetchSlice(s.r, s.m, skey, a, b, s.keep, s.purges, h.waitOf(s.r, skey))
			if err != nil {
				return nil, err
			}
			return f.entry() // never under the manifest's header unless shared
		}
	}
	if err != nil || !ran {
		// Failed, or another request fetched this slice meanwhile and
		// the stream did not move: Range requests from here.
		s.stream.Close()
		s.stream = nil
		if err != nil {
			return nil, err
		}
		return v.(fetchedSlice).e, nil
	}
	s.streamAt = k + 1
	h.metrics.SliceFetches.WithLabelValues("stream").Inc()
	return v.(fetchedSlice).e, nil
}

// storeSlice stores a slice unless a purge came since purges was read.
func (h *Handler) storeSlice(e *Entry, purges uint64) {
	if e.cc.NoStore || e.cc.Private {
		return
	}
	h.putUnlessPurged(e, purges)
}

// fetchSlice fetches bytes a–b of the object m describes with a Range
// request made from r (without its credentials and cookies), checks that
// they are what was asked of the same object, and stores them when the
// cache may keep them for everyone (sliceShareable).
func (h *Handler) fetchSlice(r *http.Request, m *Entry, skey string, a, b int64, keep bool, purges uint64, w fillWait) (fetchedSlice, error) {
	return h.fetchSliceAs(r, m, skey, a, b, keep, purges, false, w)
}

// fetchSliceAs is fetchSlice, with the reader's credentials and cookies
// when asReader: for an object the origin serves only with them, and has
// said may be shared (RFC 9111 §3.5: public, s-maxage, must-revalidate),
// which sliceShareable checks of the answer under those credentials.
func (h *Handler) fetchSliceAs(r *http.Request, m *Entry, skey string, a, b int64, keep bool, purges uint64, asReader bool, w fillWait) (fetchedSlice, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), h.cfg.RefreshTimeout)
	defer cancel()
	// It goes on after its client has gone (WithoutCancel), as a fill
	// does, and is held to the client's bound the same way (acquireUpstream;
	// a review: one address seeking through a video left every slot hanging).
	slot, why := h.acquireUpstream(r)
	if why != "" {
		return fetchedSlice{}, errOverload
	}
	defer slot.release()
	out := h.outboundRequest(r, ctx, true)
	out.Header.Set("Range", "bytes="+strconv.FormatInt(a, 10)+"-"+strconv.FormatInt(b, 10))
	// A slice is a piece of the shared object the manifest describes, and
	// is asked for as that object, without the requester's credentials or
	// cookies: asked with them, an origin that answers each user their own
	// copy (a watermark) under the same validator sent one user's bytes
	// into a response whose header, the manifest's, said public (stored
	// downstream and at the next node of a cluster for everyone), and
	// handed them to readers who joined the fetch. An origin that will not
	// answer without them fails the slice, and the request is forwarded
	// whole (sliceFailed).
	if !asReader {
		out.Header.Del("Authorization")
		out.Header.Del("Cookie")
	}
	reqTime := h.now()
	res, err := h.fetchFor(ctx, skey, out, w, false)
	if err != nil {
		return fetchedSlice{}, err
	}
	resp := res.Resp
	defer resp.Body.Close()
	respTime := h.now()
	if resp.StatusCode == http.StatusOK {
		return fetchedSlice{}, errNoRanges
	}
	if resp.StatusCode != http.StatusPartialContent {
		refusal := errSliceRefused
		if resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden {
			refusal = errSliceForbidden
		}
		return fetchedSlice{}, fmt.Errorf("%w: slice %s: origin answered %d", refusal, skey, resp.StatusCode)
	}
	ra, rb, total, ok := ParseContentRange(resp.Header.Get("Content-Range"))
	if !ok || ra != a || rb != b || total != m.sliceSize() {
		return fetchedSlice{}, fmt.Errorf("%w: asked %d-%d/%d, got %q", errChanged, a, b, m.sliceSize(), resp.Header.Get("Content-Range"))
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, b-a+2))
	if err != nil {
		return fetchedSlice{}, fmt.Errorf("proxy: reading slice %s: %w", skey, err)
	}
	if int64(len(body)) != b-a+1 {
		return fetchedSlice{}, fmt.Errorf("proxy: slice %s: %d bytes, want %d", skey, len(body), b-a+1)
	}
	whole := *resp
	whole.StatusCode = http.StatusOK
	whole.Header = resp.Header.Clone()
	delete(whole.Header, "Content-Range")
	e := h.newEntry(skey, &whole, reqTime, respTime, m.life)
	if !sameObject(e, m) {
		return fetchedSlice{}, errChanged
	}
	markSlice(e, m)
	e = e.withBody(body)
	shared := h.sliceShareable(e, out, resp.Header)
	if shared && keep && res.Keep {
		h.storeSlice(e, purges)
	}
	h.metrics.SliceFetches.WithLabelValues("range").Inc()
	return fetchedSlice{e: e, shared: shared}, nil
}

// sliceShareable reports whether a slice fetched with r's fields may be
// stored and handed to other requests: what a whole response must pass
// (storable under r's credentials with the header the origin sent, which
// still has its Set-Cookie; shareable: a heuristic lifetime with
// credentials or a cookie), and no Vary, as a sliced object's manifest
// has none (sliceable): a slice that varies is another representation,
// selected by fields the slices are not keyed by.
func (h *Handler) sliceShareable(e *Entry, r *http.Request, sent http.Header) bool {
	if len(e.VaryNames) > 0 {
		h.countNotStored(whySliceVaries)
		return false
	}
	m := miss{reqCC: requestDirectives(r), hasAuth: len(r.Header["Authorization"]) > 0}
	if ok, why := h.policy().storableUnder(e.life, m.reqCC, m.hasAuth, e.Status, sent); !ok {
		h.countNotStored(why)
		return false
	}
	if why := h.shareable(e, r, m); why != "" {
		h.countNotStored(why)
		return false
	}
	return true
}

// ParseContentRange parses "bytes a-b/total" (a known total; a ≤ b < total).
func ParseContentRange(v string) (a, b, total int64, ok bool) {
	rest, found := strings.CutPrefix(v, "bytes ")
	if !found {
		return 0, 0, 0, false
	}
	span, tot, found := strings.Cut(rest, "/")
	if !found {
		return 0, 0, 0, false
	}
	as, bs, found := strings.Cut(span, "-")
	if !found {
		return 0, 0, 0, false
	}
	var err1, err2, err3 error
	a, err1 = strconv.ParseInt(as, 10, 64)
	b, err2 = strconv.ParseInt(bs, 10, 64)
	total, err3 = strconv.ParseInt(tot, 10, 64)
	if err1 != nil || err2 != nil || err3 != nil || a < 0 || b < a || total <= b {
		return 0, 0, 0, false
	}
	return a, b, total, true
}

// firstOffset is where r's body starts: the first range's start for a
// "bytes=a-…" Range, else 0 (the slice fetched before any header is sent,
// so that a failure can still be answered another way).
func firstOffset(r *http.Request) int64 {
	v := r.Header.Get("Range")
	spec, ok := strings.CutPrefix(v, "bytes=")
	if !ok {
		return 0
	}
	first, _, _ := strings.Cut(spec, ",")
	a, _, _ := strings.Cut(strings.TrimSpace(first), "-")
	n, err := strconv.ParseInt(a, 10, 64)
	if err != nil || n < 0 {
		return 0
	}
	return n
}

// probed is what a probe learned: an entry to serve (a manifest, or the
// whole of a small object) and whether the cluster let us keep it.
type probed struct {
	e    *Entry
	keep bool
}

// HasOwnDirectives reports whether r carries Cache-Control or Pragma of
// its own: directives another request's fetch, or a cluster probe (which
// asks only-if-cached in their place), was not made under.
func HasOwnDirectives(r *http.Request) bool {
	_, cc := r.Header["Cache-Control"]
	_, pragma := r.Header["Pragma"]
	return cc || pragma
}

// probeSliced answers a Range request for a URL not in the store by asking
// the origin for the first slice only (concurrent requests share one
// probe): a 206 shows the object's size, so that a one-byte range of a
// 64 MiB object costs the origin one slice, not the object. It reports
// false when the probe did not give a servable answer (no range support,
// not storable, an error); the caller then fetches as for any miss.
func (h *Handler) probeSliced(w http.ResponseWriter, r *http.Request, m miss) (string, bool) {
	if m.hasAuth {
		return "", false // a request with credentials shares no fetch
	}
	wt := h.waitOf(r, m.key)
	var v any
	var apart bool
	var err error
	if HasOwnDirectives(r) {
		// A reload's no-cache, a max-age=0: another request's probe may
		// have been answered by a store this one asked to have checked
		// (a review's test, TestNoCacheRangeDoesNotJoinAPeersStoredAnswer).
		// It probes for itself, its directives going with it.
		v, err = h.probe(r, m, wt)
	} else {
		v, _, apart, err = h.slices.do(m.key+"\x00probe", wt, h.purges.Load(), func() (any, error) { return h.probe(r, m, wt) })
	}
	if apart {
		h.metrics.FillsKeptApart.Inc()
	}
	p, _ := v.(probed)
	if err != nil || p.e == nil {
		return "", false
	}
	if h.varyKey(p.e.VaryNames, r) != p.e.VaryKey {
		// The probe was another request's and selected another variant
		// (Vary): this one fetches for itself.
		return "", false
	}
	status := forwarded(m.fwd).withStatus(http.StatusPartialContent).withDetail("sliced")
	if p.e.sliceTotal == 0 {
		status = forwarded(m.fwd).withStatus(http.StatusOK).withDetail("whole") // answered whole: stored whole
	}
	if p.e.sliceTotal > 0 {
		h.serveSliced(w, r, p.e, status, nil, nil, p.keep, h.purges.Load())
	} else {
		h.writeEntry(w, r, p.e, h.now(), status, nil)
	}
	return ResultMiss, true
}

func (h *Handler) probe(r *http.Request, m miss, w fillWait) (probed, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), h.cfg.RefreshTimeout)
	defer cancel()
	slot, why := h.acquireUpstream(r) // held to the client's bound, as fetchSliceAs
	if why != "" {
		return probed{}, errOverload
	}
	defer slot.release()
	purges := h.purges.Load()
	out := h.outboundRequest(r, ctx, true)
	out.Header.Set("Range", "bytes=0-"+strconv.FormatInt(h.cfg.SliceBytes-1, 10))
	reqTime := h.now()
	res, err := h.fetchFor(ctx, m.key, out, w, false)
	if err != nil {
		return probed{}, err
	}
	resp := res.Resp
	defer resp.Body.Close()
	respTime := h.now()
	if resp.StatusCode == http.StatusOK {
		// No ranges at this origin: it sent the whole object. Kept as
		// any miss keeps it, it answers this range and every later one;
		// dropped, the ordinary miss would fetch it all again.
		return h.probeWhole(r, m, res, reqTime, respTime, purges)
	}
	if resp.StatusCode != http.StatusPartialContent {
		return probed{}, nil // not a plain object: an ordinary miss
	}
	a, b, total, ok := ParseContentRange(resp.Header.Get("Content-Range"))
	if !ok || a != 0 || b != min(h.cfg.SliceBytes, total)-1 {
		return probed{}, nil // not the first slice as asked
	}
	// The response as the whole object would have come.
	whole := *resp
	whole.StatusCode = http.StatusOK
	whole.ContentLength = total
	whole.Header = resp.Header.Clone()
	delete(whole.Header, "Content-Range")
	whole.Header["Content-Length"] = []string{strconv.FormatInt(total, 10)}
	if ok, _ := h.policy().storableUnder(m.ruling.lifetime(http.StatusOK), m.reqCC, m.hasAuth, http.StatusOK, whole.Header); !ok {
		return probed{}, nil
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, b+2))
	if err != nil || int64(len(body)) != b+1 {
		return probed{}, nil
	}
	keep := res.Keep && !h.purges.touchedSince(purges, m.key, whole.Header) // a first look: the Puts below look again
	if total > b+1 {
		man := h.manifestFor(r, m, &whole, reqTime, respTime)
		if man == nil {
			return probed{}, nil
		}
		if keep {
			h.storeSlice(sliceOf(man, sliceKey(m.key, 0), body), purges)
			keep = h.putUnlessPurged(man, purges)
		}
		h.metrics.SliceFetches.WithLabelValues("range").Inc()
		return probed{e: man, keep: keep}, nil
	}
	// The first slice was the whole object: store it as any response.
	e := h.newEntry(m.key, &whole, reqTime, respTime, m.ruling.lifetime(http.StatusOK))
	e.VaryKey = h.varyKey(e.VaryNames, r)
	if h.shareable(e, r, m) != "" {
		return probed{}, nil
	}
	e = e.withBody(body)
	if keep {
		keep = h.putUnlessPurged(e, purges)
	}
	return probed{e: e, keep: keep}, nil
}

// probeWhole keeps the whole object an origin without ranges sent to a
// probe, when it is storable, shareable with r and no larger than
// cache.max_object_bytes; its body is charged to the buffer budget while
// it is read. Otherwise it reports nothing (the caller fetches as for any
// miss, which passes an object too large to keep).
func (h *Handler) probeWhole(r *http.Request, m miss, res Result, reqTime, respTime time.Time, purges uint64) (probed, error) {
	resp := res.Resp
	life := m.ruling.lifetime(http.StatusOK)
	if ok, why := h.policy().storableUnder(life, m.reqCC, m.hasAuth, http.StatusOK, resp.Header); !ok {
		h.notStored(m, why, resp.StatusCode)
		return probed{}, nil
	}
	limit := h.cfg.MaxObjectBytes
	if resp.ContentLength > limit {
		h.notStored(m, whyTooLarge, resp.StatusCode)
		return probed{}, nil
	}
	charge := resp.ContentLength
	if charge < 0 {
		charge = limit
	}
	if !h.charge(charge) {
		return probed{}, nil
	}
	defer h.release(charge)
	body, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	switch {
	case err != nil:
		return probed{}, nil
	case int64(len(body)) > limit:
		h.notStored(m, whyTooLarge, resp.StatusCode)
		return probed{}, nil
	case resp.ContentLength >= 0 && int64(len(body)) != resp.ContentLength:
		return probed{}, nil // cut short
	}
	e := h.newEntry(m.key, resp, reqTime, respTime, life)
	e.VaryKey = h.varyKey(e.VaryNames, r)
	if why := h.shareable(e, r, m); why != "" {
		h.notStored(m, why, resp.StatusCode)
		return probed{}, nil
	}
	e = e.withBody(body)
	keep := res.Keep && h.putUnlessPurged(e, purges)
	h.metrics.SliceFailures.WithLabelValues("no-ranges").Inc()
	return probed{e: e, keep: keep}, nil
}

// serveSliced answers r from the sliced object manifest m describes.
// stream, if not nil, is the body of the upstream 200 that revealed the
// object, positioned at its start.
//
// purges is the purge count the slices' bytes date from: for a stream,
// the fill's (its bytes were fetched from then, and a purge since that
// names the page keeps them out of the store); else now (slices fetched
// from here on are newer than any purge so far).
func (h *Handler) serveSliced(w http.ResponseWriter, r *http.Request, m *Entry, status cacheStatus, own http.Header, stream io.ReadCloser, keep bool, purges uint64) {
	ignoreRangeUnlessGET(r)
	// The slices are read in the size the manifest was cut in, whatever
	// cache.slice_bytes is now.
	s := &slicer{h: h, r: r, m: m, size: m.sliceSize(), ssize: m.sliceBytes, stream: stream, curIdx: -1, keep: keep, purges: purges,
		cachedOnly: requestDirectives(r).OnlyIfCached}
	defer s.close()
	h.metrics.SlicedResponses.Inc()
	// The first slice this response needs is read before any header is
	// written, so that an origin without ranges, or an object that
	// changed, can still be answered whole.
	if s.cachedOnly && r.Method != http.MethodHead && !h.slicesStored(m, s, r) {
		// Answered 504 before any header: found missing mid-body, the
		// only end would be a cut connection (a review), and a peer's
		// probe must read as a miss, not a hit that breaks.
		h.sliceFailed(w, r, m, errSliceNotCached)
		return
	}
	if r.Method != http.MethodHead {
		if k := firstOffset(r) / s.ssize; k*s.ssize < s.size {
			e, err := s.slice(k)
			if err == nil {
				err = s.setCur(e, k)
			}
			if err != nil {
				h.sliceFailed(w, r, m, err)
				return
			}
		}
	}
	h.setEntryHeader(w, r, m, h.now(), status, own)
	hdr := w.Header()
	delete(hdr, sliceSizeField)
	delete(hdr, "Content-Length")
	if _, ok := hdr["Accept-Ranges"]; !ok {
		hdr["Accept-Ranges"] = []string{"bytes"}
	}
	h.extendWrite(w)
	if rng := r.Header["Range"]; len(rng) > 1 {
		delete(r.Header, "Range")
	} else if len(rng) == 1 {
		if limited, ok := limitRanges(rng[0], s.size, h.cfg.MaxRanges); !ok {
			h.metrics.Rejected.WithLabelValues("too_many_ranges").Inc()
			delete(r.Header, "Range")
		} else {
			r.Header["Range"] = []string{limited}
		}
	}
	http.ServeContent(&deadlineWriter{ResponseWriter: w, h: h}, r, "", m.lastMod, s)
	if s.err != nil {
		// Headers (and a length) are out: the only honest end is a cut
		// connection, never a short body that looks whole.
		h.log.Warn("sliced response cut", "key", m.Key, "err", s.err)
		// errNotShared and errSliceRefused keep the object: they may come
		// of this request's own fields (a WAF's refusal, an expired
		// token), and dropping the object for them let any client evict
		// it for everyone (a review). A reader the origin refuses a slice
		// is cut; one it serves, with or without credentials, is not.
		h.dropSliced(m, s.err)
		panic(http.ErrAbortHandler)
	}
}

// slicesStored reports whether every slice r's answer may read is in the
// store: those a single byte range covers, else (several ranges, If-Range,
// none) the whole object's.
func (h *Handler) slicesStored(m *Entry, s *slicer, r *http.Request) bool {
	from, to := coveredSpan(r, s.size)
	for k := from / s.ssize; k <= to/s.ssize && k*s.ssize < s.size; k++ {
		a, b := s.span(k)
		if e, _ := h.store.Lookup(sliceKey(m.Key, k), nil); e == nil || !isSlice(e, m, a, b) {
			return false
		}
	}
	return true
}

// coveredSpan is the bytes [from, to] of an object of size bytes that r's
// answer may send: a single "bytes=a-b", "a-" or "-n" range's, else all.
func coveredSpan(r *http.Request, size int64) (from, to int64) {
	all := func() (int64, int64) { return 0, size - 1 }
	rng := r.Header["Range"]
	if len(rng) != 1 || len(r.Header["If-Range"]) > 0 {
		return all()
	}
	spec, ok := strings.CutPrefix(rng[0], "bytes=")
	if !ok || strings.Contains(spec, ",") {
		return all()
	}
	a, b, ok := strings.Cut(strings.TrimSpace(spec), "-")
	if !ok {
		return all()
	}
	if a == "" { // the last n bytes
		n, err := strconv.ParseInt(b, 10, 64)
		if err != nil || n <= 0 {
			return all()
		}
		return max(size-n, 0), size - 1
	}
	x, err := strconv.ParseInt(a, 10, 64)
	if err != nil || x < 0 || x >= size {
		return all()
	}
	y := size - 1
	if b != "" {
		if y, err = strconv.ParseInt(b, 10, 64); err != nil || y < x {
			return all()
		}
	}
	return x, min(y, size-1)
}

// sliceFailed answers a request whose first slice could not be had.
func (h *Handler) sliceFailed(w http.ResponseWriter, r *http.Request, m *Entry, err error) {
	h.dropSliced(m, err)
	switch {
	case errors.Is(err, errNoRanges), errors.Is(err, errChanged), errors.Is(err, errNotShared), errors.Is(err, errSliceRefused):
		h.servePass(w, r, whySlicedFallback)
	case errors.Is(err, errSliceNotCached):
		h.writeError(w, http.StatusGatewayTimeout, refused("miss", "only-if-cached"), "not in cache")
	case errors.Is(err, errOverload):
		w.Header().Set("Retry-After", "1")
		h.reject(w, r, http.StatusServiceUnavailable, "overload", "too many requests in flight")
	case errors.Is(err, errBufferFull):
		w.Header().Set("Retry-After", "1")
		h.writeError(w, http.StatusServiceUnavailable, refused("miss", string(whyBufferFull)), "too much in flight")
	default:
		h.writeUpstreamError(w, err)
	}
}

// dropSliced forgets a manifest whose slices cannot be had as it says.
func (h *Handler) dropSliced(m *Entry, err error) {
	switch {
	case errors.Is(err, errNoRanges):
		h.removeKey(m.Key)
		h.large.Add(memoryKey(m.Key), struct{}{}) // streamed through from now on
		h.metrics.SliceFailures.WithLabelValues("no-ranges").Inc()
	case errors.Is(err, errChanged):
		h.removeKey(m.Key) // the next request learns the new object
		h.metrics.SliceFailures.WithLabelValues("changed").Inc()
	case errors.Is(err, errNotShared):
		h.metrics.SliceFailures.WithLabelValues("not-shared").Inc() // this request's answer; the object stays
	case errors.Is(err, errSliceRefused):
		h.metrics.SliceFailures.WithLabelValues("refused").Inc()
	case errors.Is(err, errBufferFull), errors.Is(err, errOverload), errors.Is(err, errSliceNotCached):
		// Load, or this request's only-if-cached, not the object: keep it.
	default:
		h.metrics.SliceFailures.WithLabelValues("error").Inc()
	}
}
