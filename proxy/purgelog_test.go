package proxy

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// gatedOrigin answers every path with max-age=600, a Surrogate-Key of
// "t" plus the path's name ("/a": t-a) and a body naming the path and the
// version, holding each answer's body until release is closed (its
// header goes at once). It counts requests per path.
type gatedOrigin struct {
	release chan struct{}
	version atomic.Int32
	mu      sync.Mutex
	calls   map[string]int
	started chan string
}

func newGatedOrigin() *gatedOrigin {
	return &gatedOrigin{release: make(chan struct{}), calls: map[string]int{}, started: make(chan string, 64)}
}

func (o *gatedOrigin) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	o.mu.Lock()
	o.calls[r.URL.Path]++
	o.mu.Unlock()
	body := fmt.Sprintf("%s v%d", r.URL.Path, o.version.Load())
	w.Header().Set("Cache-Control", "max-age=600")
	w.Header().Set("Surrogate-Key", "t-"+strings.Trim(r.URL.Path, "/"))
	w.Header().Set("Content-Length", fmt.Sprint(len(body)))
	w.(http.Flusher).Flush()
	o.started <- r.URL.Path
	<-o.release
	_, _ = io.WriteString(w, body)
}

func (o *gatedOrigin) callsOf(path string) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.calls[path]
}

// TestAPurgeOfOtherPagesLeavesAFillAlone: a fill under way when purges of
// other pages come (by URL, path prefix, host prefix, tag, soft) still
// stores what it fetched, and a request after those purges joins it. Under
// one node-wide purge count every purge stopped every fill on the node
// from storing and from being joined, so a site that purges often sent
// each of its misses to the origin twice.
func TestAPurgeOfOtherPagesLeavesAFillAlone(t *testing.T) {
	o := newGatedOrigin()
	h, _ := handlerProxy(t, o.ServeHTTP, nil)
	first := make(chan string, 1)
	go func() { first <- serve(h, "GET", "/a").Body.String() }()
	<-o.started
	// The fill's header is in (a tag purge before it cannot tell whether it
	// names the page, and counts: TestPurgeLogTouched).
	waitUntil(t, "the fill's header", func() bool {
		h.co.mu.Lock()
		defer h.co.mu.Unlock()
		for _, f := range h.co.fills {
			return f.header() != nil
		}
		return false
	})
	for _, p := range []PurgeRequest{
		{URL: "http://example.com/b"},
		{Prefix: "/other/"},
		{Prefix: "http://example.org/"},
		{Tag: "t-b"},
		{URL: "http://example.com/c", Soft: true},
	} {
		if _, err := h.Purge(p); err != nil {
			t.Fatal(err)
		}
	}
	joined := make(chan string, 1)
	go func() { joined <- serve(h, "GET", "/a").Body.String() }()
	time.Sleep(50 * time.Millisecond) // the second request joins the fill (or fetches: counted below)
	close(o.release)
	if got := <-first; got != "/a v0" {
		t.Fatalf("first request: %q", got)
	}
	if got := <-joined; got != "/a v0" {
		t.Fatalf("second request: %q", got)
	}
	w := serve(h, "GET", "/a")
	if w.Body.String() != "/a v0" || !strings.Contains(w.Header().Get("Cache-Status"), "hit") {
		t.Errorf("after the fill: %q, Cache-Status %q: the fill did not store", w.Body.String(), w.Header().Get("Cache-Status"))
	}
	if n := o.callsOf("/a"); n != 1 {
		t.Errorf("the origin was asked for /a %d times, want 1 (the second request joins the fill)", n)
	}
}

// TestAPurgeNamingAFillStopsIt: a purge that names the page of a fill
// under way, by any selector, keeps the fill from storing what it fetched
// before the purge and from being joined by a request made after it.
func TestAPurgeNamingAFillStopsIt(t *testing.T) {
	for _, p := range []PurgeRequest{
		{URL: "http://example.com/a"},
		{URL: "http://example.com/a", Soft: true},
		{Prefix: "/a"},
		{Prefix: "http://example.com/"},
		{Tag: "t-a"},
		{Tag: "t-a", Soft: true},
	} {
		t.Run(p.Query(), func(t *testing.T) {
			o := newGatedOrigin()
			h, _ := handlerProxy(t, o.ServeHTTP, nil)
			first := make(chan string, 1)
			go func() { first <- serve(h, "GET", "/a").Body.String() }()
			<-o.started
			o.version.Store(1)
			if _, err := h.Purge(p); err != nil {
				t.Fatal(err)
			}
			after := make(chan string, 1)
			go func() { after <- serve(h, "GET", "/a").Body.String() }()
			time.Sleep(50 * time.Millisecond) // it joins the old fill, if it wrongly does, before that fill's body comes
			close(o.release)
			<-first
			if got := <-after; got != "/a v1" {
				t.Errorf("a request made after the purge got %q", got)
			}
			if got := serve(h, "GET", "/a").Body.String(); got != "/a v1" {
				t.Errorf("later: %q: what was fetched before the purge was stored", got)
			}
		})
	}
}

// TestAFillOutlivingThePurgeLogIsTakenAsPurged: when more purges come
// during a fill than the log remembers, the fill cannot tell whether one
// named it, and does not store.
func TestAFillOutlivingThePurgeLogIsTakenAsPurged(t *testing.T) {
	o := newGatedOrigin()
	h, _ := handlerProxy(t, o.ServeHTTP, nil)
	first := make(chan string, 1)
	go func() { first <- serve(h, "GET", "/a").Body.String() }()
	<-o.started
	for i := range purgeLogSize + 1 {
		if _, err := h.Purge(PurgeRequest{URL: fmt.Sprintf("http://example.com/other%d", i)}); err != nil {
			t.Fatal(err)
		}
	}
	close(o.release)
	<-first
	serve(h, "GET", "/a")
	if n := o.callsOf("/a"); n != 2 {
		t.Errorf("the origin was asked for /a %d times, want 2 (the fill not stored)", n)
	}
}

// TestPurgeLogTouched checks the log's arithmetic at its edges.
func TestPurgeLogTouched(t *testing.T) {
	var l purgeLog
	is := func(k string) func(string, http.Header) bool {
		return func(key string, _ http.Header) bool { return key == k }
	}
	l.begin(is("a"), "")                      // 1
	l.begin(is("b"), "")                      // 2
	l.found(l.begin(nil, "x"), []string{"k"}) // 3: a tag purge that found k
	tagged := http.Header{"Surrogate-Key": {"x"}}
	for _, c := range []struct {
		from, to uint64
		key      string
		hdr      http.Header
		want     bool
	}{
		{0, 0, "a", nil, false},
		{2, 1, "a", nil, false},
		{0, 1, "a", nil, true},
		{1, 2, "a", nil, false},
		{1, 2, "b", nil, true},
		{2, 3, "a", nil, true},            // a tag purge, no header: counts
		{2, 3, "a", http.Header{}, false}, // the header shows no tag
		{2, 3, "a", tagged, true},
		{0, 3, "c", http.Header{}, false},
		{2, 3, "k", http.Header{}, true},            // a key the tag purge found, whatever its header
		{2, 3, "k\x00slice 2", http.Header{}, true}, // and its slices and variants
		{2, 3, "kk", http.Header{}, false},
		{2, 3, "a", http.Header{"Cache-Tag": {"y, x"}}, true},
	} {
		if got := l.touched(c.from, c.to, c.key, c.hdr); got != c.want {
			t.Errorf("touched(%d, %d, %q, %v) = %v, want %v", c.from, c.to, c.key, c.hdr, got, c.want)
		}
	}
	for range purgeLogSize {
		l.begin(is("z"), "")
	}
	if !l.touched(2, l.Load(), "a", http.Header{}) {
		t.Error("a span longer than the log's memory must count as touched")
	}
	if l.touched(l.Load()-purgeLogSize, l.Load(), "a", http.Header{}) {
		t.Error("a span the log still holds, of other keys, must not count")
	}
	var none *purgeLog
	if !none.touched(0, 1, "a", http.Header{}) || none.touched(1, 1, "a", nil) {
		t.Error("a nil log: any purge counts, none does not")
	}
}
