package proxy

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// versionedSliceOrigin serves a 3 MiB object whose bytes are all '0'+v
// (v the version when the request arrived), under an ETag that does not
// change with the content (the validator lags: the premise of the
// package's own purge tests). A request chosen by hold waits on gate
// before it answers, with the bytes of the version it arrived under.
type versionedSliceOrigin struct {
	version atomic.Int32
	// tagFull: the Surrogate-Key the whole (200) answers carry; tagRange:
	// the one Range (206) answers carry ("" none).
	tagFull, tagRange string
	hold              func(r *http.Request) bool
	arrived           chan struct{}
	gate              chan struct{}
	calls             atomic.Int64
}

const vsoSize = 3 << 20

func newVersionedSliceOrigin() *versionedSliceOrigin {
	o := &versionedSliceOrigin{arrived: make(chan struct{}, 16), gate: make(chan struct{})}
	o.version.Store(1)
	return o
}

func (o *versionedSliceOrigin) serve(w http.ResponseWriter, r *http.Request) {
	o.calls.Add(1)
	v := o.version.Load()
	if o.hold != nil && o.hold(r) {
		o.arrived <- struct{}{}
		<-o.gate
	}
	w.Header().Set("Cache-Control", "public, max-age=3600")
	w.Header().Set("Content-Type", "video/mp4")
	w.Header().Set("ETag", `"same"`)
	tag := o.tagFull
	if r.Header.Get("Range") != "" {
		tag = o.tagRange
	}
	if tag != "" {
		w.Header().Set("Surrogate-Key", tag)
	}
	http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(bytes.Repeat([]byte{byte('0' + v)}, vsoSize)))
}

// firstWrong returns the index of the first byte of b that is not want, or -1.
func firstWrong(b []byte, want byte) int {
	for i, c := range b {
		if c != want {
			return i
		}
	}
	return -1
}

// TestATagPurgeStopsAnUntaggedSliceOfATaggedObject (a review's): a tag
// purge removes a sliced object because its manifest carries the tag, and
// with it every slice of the manifest (removeKey → forSlices), whatever the
// slices' own headers say. A slice fetched by Range before the purge whose
// 206 does not carry the tag (an origin or a status-matched response rule
// that tags only the 200) was asked touched(…, slice key, slice header):
// the tag purge did not name it, so it was stored after the purge and
// spliced into the next version's object (same validator). Under the one
// node-wide count it was not stored; now a tag purge names the keys it
// found as well (purgeLog.found).
func TestATagPurgeStopsAnUntaggedSliceOfATaggedObject(t *testing.T) {
	o := newVersionedSliceOrigin()
	o.tagFull = "movie"
	h, _ := handlerProxy(t, o.serve, func(c *Config) { c.SliceBytes = 1 << 20; c.MaxObjectBytes = 1 << 20 })

	// The object is fetched whole: its manifest (tagged, from the 200) and
	// its three slices, read from that answer, are stored.
	if w := serve(h, "GET", "/movie.mp4"); w.Code != 200 || w.Body.Len() != vsoSize || firstWrong(w.Body.Bytes(), '1') >= 0 {
		t.Fatalf("first fetch: %d, %d bytes", w.Code, w.Body.Len())
	}
	key := h.requestKey(httptest.NewRequest("GET", "http://example.com/movie.mp4", nil))
	if ks := h.store.KeysWithTag("movie"); len(ks) == 0 {
		t.Fatal("the manifest does not carry the tag")
	}
	// The LRU lets go of the last slice alone (slices are entries of their
	// own, evicted one by one).
	h.store.Remove(sliceKey(key, 2))

	purgeTagDuringRangeFetch(t, o, h, key, func(hdr ...string) *httptest.ResponseRecorder { return serve(h, "GET", "/movie.mp4", hdr...) })
}

// TestStreamSlicesOfAFillOvertakenByAPurgeAreNotStored (a review's): a fill whose
// request went to the origin before a URL purge, and whose answer (a
// sliced object) comes after it, does not store its manifest
// (putUnlessPurged from the fill's count), but its leader reads the first
// slices from that answer with a slicer whose count was read when it
// started serving (serveSliced: h.purges.Load()), after the purge: they
// were stored, and the next version's manifest (same validator) was
// served with them. Older than the purge log; the slicer of a stream now
// takes the fill's count, and keeps slices only if the manifest was kept.
func TestStreamSlicesOfAFillOvertakenByAPurgeAreNotStored(t *testing.T) {
	o := newVersionedSliceOrigin()
	h, _ := handlerProxy(t, o.serve, func(c *Config) { c.SliceBytes = 1 << 20; c.MaxObjectBytes = 1 << 20 })
	var first atomic.Bool
	o.hold = func(r *http.Request) bool { return r.Header.Get("Range") == "" && first.CompareAndSwap(false, true) }
	done := make(chan *httptest.ResponseRecorder, 1)
	go func() { done <- serve(h, "GET", "/movie.mp4") }()
	<-o.arrived // the request is at the origin, which has chosen version 1
	o.version.Store(2)
	if _, err := h.Purge(PurgeRequest{URL: "http://example.com/movie.mp4"}); err != nil {
		t.Fatal(err)
	}
	close(o.gate)
	if w := <-done; w.Code != 200 {
		t.Fatalf("first request: %d", w.Code)
	}
	h.Wait()

	key := h.requestKey(httptest.NewRequest("GET", "http://example.com/movie.mp4", nil))
	for k := range int64(3) {
		if e, _ := h.store.Lookup(sliceKey(key, k), nil); e != nil && len(e.Body) > 0 && e.Body[0] == '1' {
			t.Errorf("slice %d of version 1, fetched before the purge, is in the store after it", k)
		}
	}
	w := serve(h, "GET", "/movie.mp4")
	if i := firstWrong(w.Body.Bytes(), '2'); w.Code != 200 || w.Body.Len() != vsoSize || i >= 0 {
		t.Errorf("a request made after the purge: %d, %d bytes, first byte not of version 2 at %d, Cache-Status %q",
			w.Code, w.Body.Len(), i, w.Header().Get("Cache-Status"))
	}
}

// TestATagPurgeByAStatusRuleTagStopsAnUntaggedSlice is the
// previous test with an ordinary origin (no tags of its own) and the tag
// added by a cache rule that matches on status 200, as an operator tags
// "the successful answers" of a path: the manifest, from the 200, carries
// it; a slice, from a 206, does not. The tag purge removes the object
// with its slices, and a slice fetched before it was stored after it.
func TestATagPurgeByAStatusRuleTagStopsAnUntaggedSlice(t *testing.T) {
	o := newVersionedSliceOrigin()
	site := ruleSite(t, `[{name: tag, match: {status: [200]}, response_headers: {set: {Surrogate-Key: movie}}}]`)
	p := newRuleProxy(t, site, o.serve, func(c *Config) { c.SliceBytes = 1 << 20; c.MaxObjectBytes = 1 << 20 })
	h := p.h
	if w := p.get("/movie.mp4"); w.Code != 200 || w.Body.Len() != vsoSize || firstWrong(w.Body.Bytes(), '1') >= 0 {
		t.Fatalf("first fetch: %d, %d bytes", w.Code, w.Body.Len())
	}
	var key string
	for _, k := range h.store.KeysWithTag("movie") {
		if !strings.Contains(k, "\x00") {
			key = k
		}
	}
	if key == "" {
		t.Fatal("the rule's tag is not on the manifest")
	}
	h.store.Remove(sliceKey(key, 2)) // evicted alone
	purgeTagDuringRangeFetch(t, o, h, key, func(hdr ...string) *httptest.ResponseRecorder { return p.get("/movie.mp4", hdr...) })
}

// purgeTagDuringRangeFetch fetches the object's last slice (evicted) with a
// Range request held at the origin with version 1's bytes, purges the tag
// "movie" while it is held (the content now version 2), and checks that
// nothing fetched before the purge is stored or served after it.
func purgeTagDuringRangeFetch(t *testing.T, o *versionedSliceOrigin, h *Handler, key string, get func(hdr ...string) *httptest.ResponseRecorder) {
	t.Helper()
	o.hold = func(r *http.Request) bool { return strings.HasPrefix(r.Header.Get("Range"), "bytes=2097152-") }
	done := make(chan *httptest.ResponseRecorder, 1)
	go func() { done <- get("Range", "bytes=2097152-2097155") }()
	<-o.arrived
	o.hold = nil
	o.version.Store(2)
	if n, err := h.Purge(PurgeRequest{Tag: "movie"}); err != nil || n == 0 {
		t.Fatalf("purge: %d %v", n, err)
	}
	close(o.gate)
	<-done
	h.Wait()

	// The purge has returned. Nothing fetched before it may be served.
	if e, _ := h.store.Lookup(sliceKey(key, 2), nil); e != nil && len(e.Body) > 0 && e.Body[0] == '1' {
		t.Errorf("the store holds version 1's last slice, fetched before the tag purge that removed its object, stored after it")
	}
	w := get()
	if i := firstWrong(w.Body.Bytes(), '2'); w.Code != 200 || w.Body.Len() != vsoSize || i >= 0 {
		t.Errorf("a request made after the purge: %d, %d bytes, first byte not of version 2 at %d, Cache-Status %q",
			w.Code, w.Body.Len(), i, w.Header().Get("Cache-Status"))
	}
}
