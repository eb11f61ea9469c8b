package proxy

import (
	"bytes"
	"crypto/sha256"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// sliceOrigin serves an object of size bytes with Range support (unless
// noRanges), counting whole fetches, Range fetches and body bytes sent.
type sliceOrigin struct {
	body                 []byte
	etag                 atomic.Pointer[string]
	whole, ranged, bytes atomic.Int64
	noRanges             bool
	mu                   sync.Mutex
	ranges               []string // the Range fields asked, in order
}

func newSliceOrigin(size int) *sliceOrigin {
	o := &sliceOrigin{body: make([]byte, size)}
	for i := range o.body {
		o.body[i] = byte(i*7 + i>>13)
	}
	tag := `"v1"`
	o.etag.Store(&tag)
	return o
}

func (o *sliceOrigin) serve(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "public, max-age=3600")
	w.Header().Set("Content-Type", "video/mp4")
	w.Header().Set("ETag", *o.etag.Load())
	cw := &countWriter{ResponseWriter: w, n: &o.bytes}
	if r.Header.Get("Range") != "" && !o.noRanges {
		o.ranged.Add(1)
		o.mu.Lock()
		o.ranges = append(o.ranges, r.Header.Get("Range"))
		o.mu.Unlock()
		http.ServeContent(cw, r, "", time.Time{}, bytes.NewReader(o.body))
		return
	}
	o.whole.Add(1)
	w.Header().Set("Content-Length", strconv.Itoa(len(o.body)))
	_, _ = cw.Write(o.body)
}

type countWriter struct {
	http.ResponseWriter
	n *atomic.Int64
}

func (c *countWriter) Write(b []byte) (int, error) {
	n, err := c.ResponseWriter.Write(b)
	c.n.Add(int64(n))
	return n, err
}

func sliceProxy(t *testing.T, o *sliceOrigin) *Handler {
	h, _ := handlerProxy(t, o.serve, func(c *Config) { c.SliceBytes = 1 << 20; c.MaxObjectBytes = 1 << 20 })
	return h
}

func TestSlicesRangeFetchesOnlyWhatItNeeds(t *testing.T) {
	o := newSliceOrigin(8 << 20)
	h := sliceProxy(t, o)
	w := serve(h, "GET", "/movie.mp4", "Range", "bytes=0-0")
	if w.Code != http.StatusPartialContent || w.Body.Len() != 1 || w.Body.Bytes()[0] != o.body[0] {
		t.Fatalf("first byte: %d, %d bytes", w.Code, w.Body.Len())
	}
	waitUntil(t, "the origin's byte count settles", func() bool { return o.bytes.Load() >= 1<<20 })
	if sent := o.bytes.Load(); sent != 1<<20 || o.whole.Load() != 0 {
		t.Fatalf("a one-byte range cost the origin %d bytes and %d whole fetches; want one 1 MiB slice", sent, o.whole.Load())
	}
	before := o.bytes.Load()
	w = serve(h, "GET", "/movie.mp4")
	if w.Code != http.StatusOK || !bytes.Equal(w.Body.Bytes(), o.body) {
		t.Fatalf("whole object: %d, %d bytes, equal %v", w.Code, w.Body.Len(), bytes.Equal(w.Body.Bytes(), o.body))
	}
	// The origin counts a chunk when its Write returns, which can be
	// after the client has read it: wait for the count, not the bytes.
	waitUntil(t, "the origin's byte count settles", func() bool { return o.bytes.Load()-before >= 7<<20 })
	if o.ranged.Load() != 1+7 || o.bytes.Load()-before != 7<<20 {
		t.Fatalf("the full read made %d Range requests in all and fetched %d bytes, want the probe and the 7 missing slices once", o.ranged.Load(), o.bytes.Load()-before)
	}
	// Everything is stored now: any range is a hit.
	calls := o.whole.Load() + o.ranged.Load()
	w = serve(h, "GET", "/movie.mp4", "Range", "bytes=3000000-5000000")
	if w.Code != http.StatusPartialContent || !bytes.Equal(w.Body.Bytes(), o.body[3000000:5000001]) {
		t.Fatalf("stored range: %d, %d bytes", w.Code, w.Body.Len())
	}
	w = serve(h, "GET", "/movie.mp4", "Range", "bytes=-100")
	if !bytes.Equal(w.Body.Bytes(), o.body[len(o.body)-100:]) {
		t.Fatal("suffix range wrong")
	}
	if o.whole.Load()+o.ranged.Load() != calls {
		t.Fatal("stored slices fetched again")
	}
	if w := serve(h, "GET", "/movie.mp4", "If-None-Match", `"v1"`); w.Code != http.StatusNotModified {
		t.Fatalf("conditional on a sliced object: %d", w.Code)
	}
}

func TestSlicesConcurrentReadersFetchEachSliceOnce(t *testing.T) {
	o := newSliceOrigin(6 << 20)
	h := sliceProxy(t, o)
	serve(h, "GET", "/m", "Range", "bytes=0-0") // manifest and slice 0
	var wg sync.WaitGroup
	want := sha256.Sum256(o.body)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if w := serve(h, "GET", "/m"); sha256.Sum256(w.Body.Bytes()) != want {
				t.Error("a concurrent reader got the wrong bytes")
			}
		}()
	}
	wg.Wait()
	// Each missing slice is asked once: by a reader's Range request, or
	// as the start of a stream a reader reads on through the following
	// slices. Which reader gets to a slice first, and so whether one
	// stream or several cover slices 1–5, depends on scheduling; that no
	// byte range is asked twice does not.
	o.mu.Lock()
	defer o.mu.Unlock()
	seen := map[string]bool{}
	for _, r := range o.ranges {
		start, _, _ := strings.Cut(strings.TrimPrefix(r, "bytes="), "-")
		if seen[start] {
			t.Fatalf("8 concurrent readers: the range from %s was asked twice (%v)", start, o.ranges)
		}
		seen[start] = true
	}
	if n := len(o.ranges); n < 1+1 || n > 1+5 {
		t.Fatalf("8 concurrent readers: %d Range requests (%v), want the probe and at most one per missing slice (5)", n, o.ranges)
	}
}

func TestSlicesOriginWithoutRanges(t *testing.T) {
	o := newSliceOrigin(4 << 20)
	o.noRanges = true
	h := sliceProxy(t, o)
	// A whole read needs no ranges: the slices come from the stream.
	if w := serve(h, "GET", "/a"); !bytes.Equal(w.Body.Bytes(), o.body) {
		t.Fatal("whole read from a no-range origin")
	}
	if w := serve(h, "GET", "/a", "Range", "bytes=2000000-2000009"); w.Code != http.StatusPartialContent || !bytes.Equal(w.Body.Bytes(), o.body[2000000:2000010]) {
		t.Fatalf("range of stored slices: %d", w.Code)
	}
	// A range in the middle of an unknown object: the origin's 200 to
	// the slice request shows it has no ranges; the request is answered
	// (whole, which RFC 9110 allows) and the key is streamed from now on.
	w := serve(h, "GET", "/b", "Range", "bytes=3000000-3000009")
	if w.Code != http.StatusOK || !bytes.Equal(w.Body.Bytes(), o.body) {
		t.Fatalf("no-range fallback: %d, %d bytes", w.Code, w.Body.Len())
	}
	if _, large := h.large.Get(h.requestKey(httptestRequestWithBody("GET", "/b", ""))); !large {
		t.Fatal("key not marked for streaming")
	}
}

func TestSlicesNeverSpliceTwoVersions(t *testing.T) {
	o := newSliceOrigin(4 << 20)
	h := sliceProxy(t, o)
	serve(h, "GET", "/c", "Range", "bytes=0-0") // manifest of v1 and slice 0
	v2 := `"v2"`
	o.etag.Store(&v2)
	for i := range o.body {
		o.body[i] ^= 0xff
	}
	// Slice 1 now comes back as v2: the response must not mix them.
	w := serveRecover(h, "GET", "/c")
	if w.Code == http.StatusOK && len(w.Body.Bytes()) == len(o.body) {
		t.Fatalf("a response spliced from two versions was sent whole")
	}
	// The manifest is gone: the next request gets v2 whole and right.
	w2 := serve(h, "GET", "/c")
	if !bytes.Equal(w2.Body.Bytes(), o.body) || w2.Header().Get("ETag") != `"v2"` {
		t.Fatalf("after the change: ETag %q, equal %v", w2.Header().Get("ETag"), bytes.Equal(w2.Body.Bytes(), o.body))
	}
}

// serveRecover is serve for a handler that may abort the response (as
// net/http's server would recover http.ErrAbortHandler).
func serveRecover(h *Handler, method, target string) (w *recorderResult) {
	rec := newRecorder()
	func() {
		defer func() {
			if v := recover(); v != nil && v != http.ErrAbortHandler {
				panic(v)
			}
		}()
		h.ServeHTTP(rec, httptestRequestWithBody(method, target, ""))
	}()
	h.Wait()
	return &recorderResult{Code: rec.Code, Body: rec.Body}
}

type recorderResult struct {
	Code int
	Body *bytes.Buffer
}

func TestForgedManifestFieldIsIgnored(t *testing.T) {
	h, _ := handlerProxy(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=60")
		w.Header().Set(sliceSizeField, "99999999")
		_, _ = w.Write([]byte("small page"))
	}, func(c *Config) { c.SliceBytes = 1 << 20 })
	for range 2 {
		if w := serve(h, "GET", "/x"); w.Body.String() != "small page" {
			t.Fatalf("forged manifest field: body %q", w.Body.String())
		}
	}
}

func TestParseContentRange(t *testing.T) {
	for _, c := range []struct {
		in                string
		start, end, total int64
		ok                bool
	}{
		{"bytes 10-19/20", 10, 19, 20, true},
		{"bytes 0-0/1", 0, 0, 1, true},
		{"bytes 0-0/*", 0, 0, 0, false},
		{"bytes 10-19/15", 0, 0, 0, false},
		{"bytes 19-10/20", 0, 0, 0, false},
		{"bytes -1-10/20", 0, 0, 0, false},
		{"items 0-1/2", 0, 0, 0, false},
		{"bytes 0-1", 0, 0, 0, false},
		{"bytes a-b/c", 0, 0, 0, false},
		{"", 0, 0, 0, false},
	} {
		s, e, total, ok := ParseContentRange(c.in)
		if ok != c.ok || (ok && (s != c.start || e != c.end || total != c.total)) {
			t.Errorf("%q: %d %d %d %v", c.in, s, e, total, ok)
		}
	}
}
