package proxy

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// pausingWriter is a ResponseWriter whose Write blocks once, when the bytes
// written reach at, until gate is closed (a client that stops reading).
type pausingWriter struct {
	hdr     http.Header
	code    int
	mu      sync.Mutex
	buf     bytes.Buffer
	at      int
	reached chan struct{}
	gate    chan struct{}
	once    sync.Once
}

func newPausingWriter(at int) *pausingWriter {
	return &pausingWriter{hdr: http.Header{}, at: at, reached: make(chan struct{}), gate: make(chan struct{})}
}

func (w *pausingWriter) Header() http.Header { return w.hdr }
func (w *pausingWriter) WriteHeader(c int) {
	if w.code == 0 {
		w.code = c
	}
}
func (w *pausingWriter) Write(p []byte) (int, error) {
	if w.code == 0 {
		w.code = 200
	}
	w.mu.Lock()
	w.buf.Write(p)
	n := w.buf.Len()
	w.mu.Unlock()
	if n >= w.at {
		w.once.Do(func() { close(w.reached); <-w.gate })
	}
	return len(p), nil
}

// TestAStreamSliceFlightBegunAfterAPurgeIsNotJoined (a review's): the
// leader of a sliced object's fill reads its slices from the origin's 200
// (fromStream), each under a slice flight that other readers join. The
// flight was labelled with the purge count when the flight started
// (h.purges.Load()), but its bytes are read from a stream that dates from
// the fill's start (s.purges, older; now its label). A flight for slice k that started after
// a URL purge (the leader's client was slow to read slice k-1) was thus taken
// as newer than the purge, and a request made after Purge returned joined it
// and was answered with bytes the origin sent before the purge (same
// validator: the premise of the package's purge tests).
func TestAStreamSliceFlightBegunAfterAPurgeIsNotJoined(t *testing.T) {
	const slice = 1 << 20
	var version atomic.Int32
	version.Store(1)
	var first atomic.Bool
	midStream := make(chan struct{})
	originGate := make(chan struct{})
	h, _ := handlerProxy(t, func(w http.ResponseWriter, r *http.Request) {
		v := version.Load()
		w.Header().Set("Cache-Control", "public, max-age=3600")
		w.Header().Set("Content-Type", "video/mp4")
		w.Header().Set("ETag", `"same"`)
		body := bytes.Repeat([]byte{byte('0' + v)}, vsoSize)
		if r.Header.Get("Range") == "" && first.CompareAndSwap(false, true) {
			// The first (whole) answer: slice 0, then a pause.
			w.Header().Set("Content-Length", strconv.Itoa(vsoSize))
			w.WriteHeader(200)
			w.Write(body[:slice])
			w.(http.Flusher).Flush()
			close(midStream)
			<-originGate
			w.Write(body[slice:])
			return
		}
		http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(body))
	}, func(c *Config) { c.SliceBytes = slice; c.MaxObjectBytes = slice })

	// A: a whole GET whose client stops reading at the end of slice 0.
	bw := newPausingWriter(slice)
	aDone := make(chan struct{})
	go func() {
		defer close(aDone)
		h.ServeHTTP(bw, httptest.NewRequest("GET", "http://example.com/movie.mp4", nil))
	}()
	<-midStream
	<-bw.reached

	// The content changes; the operator purges the URL.
	version.Store(2)
	if _, err := h.Purge(PurgeRequest{URL: "http://example.com/movie.mp4"}); err != nil {
		t.Fatal(err)
	}
	key := h.requestKey(httptest.NewRequest("GET", "http://example.com/movie.mp4", nil))
	skey := sliceKey(key, 1)

	// A's client reads on: its slicer starts slice 1's flight, reading
	// the (pre-purge) stream, which the origin holds.
	close(bw.gate)
	waitUntil(t, "A's stream flight for slice 1", func() bool {
		h.slices.mu.Lock()
		defer h.slices.mu.Unlock()
		_, ok := h.slices.m[skey]
		return ok
	})

	// B: a request made after the purge, for 4 bytes of slice 1.
	bDone := make(chan *httptest.ResponseRecorder, 1)
	go func() {
		r := httptest.NewRequest("GET", "http://example.com/movie.mp4", nil)
		r.Header.Set("Range", "bytes=1048576-1048579")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		bDone <- w
	}()
	joined := false
	deadline := time.Now().Add(2 * time.Second)
	for time.Now().Before(deadline) && !joined {
		select {
		case w := <-bDone:
			// B did not join: it must have version 2.
			if w.Body.String() != "2222" {
				t.Errorf("B (after the purge) got %q, want 2222", w.Body.String())
			}
			close(originGate)
			<-aDone
			h.Wait()
			return
		default:
		}
		h.slices.mu.Lock()
		if f, ok := h.slices.m[skey]; ok && f.waiters > 0 {
			joined = true
		}
		h.slices.mu.Unlock()
		time.Sleep(time.Millisecond)
	}
	close(originGate)
	w := <-bDone
	<-aDone
	h.Wait()
	if w.Body.String() != "2222" {
		t.Errorf("a request made after the URL purge returned was answered %q (version 1's bytes, read from a fill's stream begun before the purge; joined: %v), want \"2222\"; Cache-Status %q",
			w.Body.String(), joined, w.Header().Get("Cache-Status"))
	}
}

// TestAURLPurgeRemovesTheSlicesOfAnEvictedManifest (a review's): removeKey
// found a sliced object's slices through its manifest (forSlices looked the
// manifest up to count them; now the store indexes slices by their object's
// key, KeysUnder). The LRU evicts the manifest first (it is stored before
// the slices read from its answer, and a reader of the object looks it up
// before its slices): once it had gone, a purge of the URL removed nothing
// of the object, and its slices, fetched before the purge, were served after
// it under the next version's manifest (same validator).
func TestAURLPurgeRemovesTheSlicesOfAnEvictedManifest(t *testing.T) {
	o := newVersionedSliceOrigin()
	h, _ := handlerProxy(t, func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/small") {
			w.Header().Set("Cache-Control", "public, max-age=3600")
			w.Write(make([]byte, 64<<10))
			return
		}
		o.serve(w, r)
	}, func(c *Config) { c.SliceBytes = 1 << 20; c.MaxObjectBytes = 1 << 20 })
	if w := serve(h, "GET", "/movie.mp4"); w.Code != 200 || firstWrong(w.Body.Bytes(), '1') >= 0 {
		t.Fatalf("first fetch: %d", w.Code)
	}
	key := h.requestKey(httptest.NewRequest("GET", "http://example.com/movie.mp4", nil))
	// Other objects fill the store until the LRU lets go of the manifest.
	for i := 0; ; i++ {
		if i > 5000 {
			t.Fatal("the manifest was never evicted")
		}
		if len(h.store.Keys(func(k string) bool { return k == key })) == 0 {
			break
		}
		serve(h, "GET", "/small"+strconv.Itoa(i))
	}
	left := len(h.store.Keys(func(k string) bool { return strings.HasPrefix(k, key+"\x00") }))
	t.Logf("manifest evicted, %d slice(s) left", left)
	if left == 0 {
		t.Skip("the slices went with the manifest")
	}
	o.version.Store(2)
	if _, err := h.Purge(PurgeRequest{URL: "http://example.com/movie.mp4"}); err != nil {
		t.Fatal(err)
	}
	for k := range int64(3) {
		if e, _ := h.store.Lookup(sliceKey(key, k), nil); e != nil && e.Body[0] == '1' {
			t.Errorf("slice %d of version 1 is in the store after the URL purge", k)
		}
	}
	w := serve(h, "GET", "/movie.mp4")
	if i := firstWrong(w.Body.Bytes(), '2'); w.Code != 200 || w.Body.Len() != vsoSize || i >= 0 {
		t.Errorf("a request made after the purge: %d, %d bytes, first byte not of version 2 at %d, Cache-Status %q",
			w.Code, w.Body.Len(), i, w.Header().Get("Cache-Status"))
	}
}

// TestATagPurgeThatFindsOnlySlicesNamesTheirObject (a review's): a tag
// purge names the keys KeysWithTag found (purgeLog.found), matched against
// the checked key's base (before its first NUL). When the store holds the
// object's tagged slices (read from its 200) but no longer its manifest
// (evicted first), what was found was the slices' keys, which no base ever
// equals: a Range fetch of another slice under way at the purge, whose
// 206 carries no tag, was stored after it and served under the next
// version's manifest. found now keeps the keys' bases.
func TestATagPurgeThatFindsOnlySlicesNamesTheirObject(t *testing.T) {
	o := newVersionedSliceOrigin()
	o.tagFull = "movie"
	h, _ := handlerProxy(t, o.serve, func(c *Config) { c.SliceBytes = 1 << 20; c.MaxObjectBytes = 1 << 20 })
	if w := serve(h, "GET", "/movie.mp4"); w.Code != 200 || firstWrong(w.Body.Bytes(), '1') >= 0 {
		t.Fatalf("first fetch: %d", w.Code)
	}
	key := h.requestKey(httptest.NewRequest("GET", "http://example.com/movie.mp4", nil))
	h.store.Remove(sliceKey(key, 2)) // evicted alone, as the package's tests do

	o.hold = func(r *http.Request) bool { return strings.HasPrefix(r.Header.Get("Range"), "bytes=2097152-") }
	done := make(chan *httptest.ResponseRecorder, 1)
	go func() { done <- serve(h, "GET", "/movie.mp4", "Range", "bytes=2097152-2097155") }()
	<-o.arrived
	o.hold = nil
	h.store.Remove(key) // the LRU lets go of the manifest meanwhile

	o.version.Store(2)
	if n, err := h.Purge(PurgeRequest{Tag: "movie"}); err != nil || n == 0 {
		t.Fatalf("purge: %d %v", n, err)
	}
	close(o.gate)
	<-done
	h.Wait()
	if e, _ := h.store.Lookup(sliceKey(key, 2), nil); e != nil && e.Body[0] == '1' {
		t.Errorf("the store holds version 1's last slice, fetched before the tag purge, stored after it")
	}
	w := serve(h, "GET", "/movie.mp4")
	if i := firstWrong(w.Body.Bytes(), '2'); w.Code != 200 || w.Body.Len() != vsoSize || i >= 0 {
		t.Errorf("a request made after the purge: %d, %d bytes, first byte not of version 2 at %d, Cache-Status %q",
			w.Code, w.Body.Len(), i, w.Header().Get("Cache-Status"))
	}
}

// BenchmarkTouchedFullLogOfPathPrefixPurges: one check when the log
// holds 1,024 path-prefix purges (a CMS purging /articles/<id>/ as it
// edits): each record's closure runs pathOfKey on the key, under the
// log's mutex, inside the coalescer's mutex (co.join) for every join of a
// fill older than them.
func BenchmarkTouchedFullLogOfPathPrefixPurges(b *testing.B) {
	h, _ := handlerProxy(&testing.T{}, func(w http.ResponseWriter, r *http.Request) {}, nil)
	for i := range purgeLogSize {
		p := PurgeRequest{Prefix: "/articles/" + strconv.Itoa(i) + "/"}
		h.purges.begin(h.PurgeScope(p), "")
	}
	from := h.purges.Load() - purgeLogSize
	key := "http://example.com/a/very/long/path/to/some/page/that/is/not/an/article.html?x=1"
	b.ReportAllocs()
	for b.Loop() {
		if h.purges.touched(from, h.purges.Load(), key, nil) {
			b.Fatal("touched")
		}
	}
}

// TestTheLogOfTagPurgesHoldsBoundedMemory (a review's): each tag purge's
// record kept a set of every key Purge found for as long as it was among
// the latest 1,024: a CMS purging a tag that 10,000 pages carry once a
// second kept 1,024 sets of 10,000 keys (426 MiB measured), outside any
// budget. A record now keeps at most purgeFoundMax keys, and a purge that
// found more names every page instead.
func TestTheLogOfTagPurgesHoldsBoundedMemory(t *testing.T) {
	many := make([]string, purgeFoundMax+1)
	for i := range many {
		many[i] = "http://example.com/articles/" + strconv.Itoa(i) + "/index.html"
	}
	var l purgeLog
	n := l.begin(nil, "home")
	l.found(n, many)
	if r := l.recent[n%purgeLogSize]; r.keys != nil || r.tag != "" || r.names != nil {
		t.Errorf("a purge that found %d keys keeps a set of %d (tag %q)", len(many), len(r.keys), r.tag)
	}
	if !l.touched(n-1, n, "http://example.com/elsewhere", http.Header{}) {
		t.Error("a purge that found too many keys to keep must name every page")
	}
	n = l.begin(nil, "nav")
	l.found(n, many[:10])
	if r := l.recent[n%purgeLogSize]; len(r.keys) != 10 {
		t.Errorf("a purge that found 10 keys keeps %d", len(r.keys))
	}
	if l.touched(n-1, n, "http://example.com/elsewhere", http.Header{}) {
		t.Error("a purge that found 10 keys names another page")
	}
}
