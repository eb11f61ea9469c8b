package demosite

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
)

func TestDemoIsDeterministic(t *testing.T) {
	a, b := New(Config{}), New(Config{})
	for _, path := range []string{"/p/1", "/p/123456789", "/size/4096", "/cache/etag/7", "/vary/3"} {
		ra, rb := httptest.NewRecorder(), httptest.NewRecorder()
		a.ServeHTTP(ra, httptest.NewRequest("GET", path, nil))
		b.ServeHTTP(rb, httptest.NewRequest("GET", path, nil))
		if ra.Code != 200 || ra.Body.String() != rb.Body.String() {
			t.Errorf("%s: %d, bodies equal %v", path, ra.Code, ra.Body.String() == rb.Body.String())
		}
	}
	if a.Requests("/p/1") != 1 || a.Total() != 5 {
		t.Errorf("request counts %d %d", a.Requests("/p/1"), a.Total())
	}
}

func TestDemoPageSizeMix(t *testing.T) {
	var small, mid, large, huge int
	for n := range uint64(10000) {
		switch s := PageSize(n); {
		case s < 8<<10:
			small++
		case s < 32<<10:
			mid++
		case s < 256<<10:
			large++
		default:
			huge++
		}
	}
	// The documented mix: 50 / 35 / 12 / 3 %.
	for _, c := range []struct {
		name      string
		got, want int
	}{{"small", small, 5000}, {"mid", mid, 3500}, {"large", large, 1200}, {"huge", huge, 300}} {
		if d := c.got - c.want; d < -c.want/5 || d > c.want/5 {
			t.Errorf("%s pages: %d of 10000, want about %d", c.name, c.got, c.want)
		}
	}
}

func TestDemoConditionalAndCases(t *testing.T) {
	d := New(Config{})
	w := httptest.NewRecorder()
	d.ServeHTTP(w, httptest.NewRequest("GET", "/p/5", nil))
	etag := w.Header().Get("ETag")
	req := httptest.NewRequest("GET", "/p/5", nil)
	req.Header.Set("If-None-Match", etag)
	w = httptest.NewRecorder()
	d.ServeHTTP(w, req)
	if w.Code != http.StatusNotModified {
		t.Errorf("conditional: %d", w.Code)
	}
	for c, want := range map[string]string{"no-store": "no-store", "private": "private, max-age=60", "s-maxage": "max-age=0, s-maxage=60"} {
		w = httptest.NewRecorder()
		d.ServeHTTP(w, httptest.NewRequest("GET", "/cache/"+c+"/1", nil))
		if got := w.Header().Get("Cache-Control"); got != want {
			t.Errorf("%s: Cache-Control %q", c, got)
		}
	}
	w = httptest.NewRecorder()
	d.ServeHTTP(w, httptest.NewRequest("GET", "/nothing/here", nil))
	if w.Code != 404 {
		t.Errorf("unknown path: %d", w.Code)
	}
}

// TestStalledBodyFails: an origin that sends headers and part of a body
// and then stalls does not hold the reader forever.

func TestVerifyPage(t *testing.T) {
	size := PageSize(7)
	good := http.Header{"Etag": {fmt.Sprintf(`"p-7-%d"`, size)}}
	cases := []struct {
		name string
		path string
		h    http.Header
		n    int64
		want bool
	}{
		{"page", "/p/7", good, int64(size), true},
		{"query", "/p/7?v=1", good, int64(size), true},
		{"coded", "/p/7", http.Header{"Etag": {fmt.Sprintf(`W/"p-7-%d-gzip"`, size)}}, int64(size), true},
		{"other page's tag", "/p/8", good, int64(size), false},
		{"short body", "/p/7", good, int64(size) - 1, false},
		{"no tag", "/p/7", http.Header{}, int64(size), false},
		{"longer number", "/p/7", http.Header{"Etag": {fmt.Sprintf(`"p-7-%d0"`, size)}}, int64(size), false},
		{"not a page", "/size/10", http.Header{}, 3, true},
		{"not a number", "/p/x", http.Header{}, 3, true},
	}
	for _, c := range cases {
		if got := VerifyPage(c.path, c.h, c.n); got != c.want {
			t.Errorf("%s: VerifyPage = %v, want %v", c.name, got, c.want)
		}
	}
}

// TestStatsByRemote: with by_remote, the stats name which client address
// asked for which path, as a lab with one address per cache needs.
func TestStatsByRemote(t *testing.T) {
	d := New(Config{})
	for _, remote := range []string{"198.51.100.1:4000", "198.51.100.1:4001", "198.51.100.2:4000"} {
		req := httptest.NewRequest("GET", "/p/3", nil)
		req.RemoteAddr = remote
		d.ServeHTTP(httptest.NewRecorder(), req)
	}
	rec := httptest.NewRecorder()
	d.ServeHTTP(rec, httptest.NewRequest("GET", "/_stats?by_remote=1", nil))
	var s struct {
		ByRemote map[string]map[string]int `json:"by_remote"`
	}
	if err := json.NewDecoder(rec.Body).Decode(&s); err != nil {
		t.Fatal(err)
	}
	if s.ByRemote["198.51.100.1"]["/p/3"] != 2 || s.ByRemote["198.51.100.2"]["/p/3"] != 1 {
		t.Fatalf("by_remote %v", s.ByRemote)
	}
}

// TestRangeWithIfRange: the origin answers Range as static servers do (an
// edge cluster resumes a broken peer answer with it): 206 for the current
// entity tag, the whole page for another.
func TestRangeWithIfRange(t *testing.T) {
	d := New(Config{})
	get := func(hdr map[string]string) *httptest.ResponseRecorder {
		r := httptest.NewRequest("GET", "/p/7", nil)
		for k, v := range hdr {
			r.Header.Set(k, v)
		}
		w := httptest.NewRecorder()
		d.ServeHTTP(w, r)
		return w
	}
	whole := get(nil)
	etag := whole.Header().Get("ETag")
	part := get(map[string]string{"Range": "bytes=100-", "If-Range": etag})
	if part.Code != http.StatusPartialContent || part.Body.String() != whole.Body.String()[100:] || part.Header().Get("ETag") != etag {
		t.Fatalf("Range with the current tag: %d, %d bytes, ETag %q", part.Code, part.Body.Len(), part.Header().Get("ETag"))
	}
	if ct := part.Header().Get("Content-Type"); ct != whole.Header().Get("Content-Type") {
		t.Errorf("Content-Type %q, want %q", ct, whole.Header().Get("Content-Type"))
	}
	if other := get(map[string]string{"Range": "bytes=100-", "If-Range": `"p-7-0"`}); other.Code != http.StatusOK || other.Body.Len() != whole.Body.Len() {
		t.Fatalf("Range with another tag: %d, %d bytes", other.Code, other.Body.Len())
	}
}

// A large object's ranges are the same bytes as its whole body, across
// the filler's repeats and at its ends.
func TestLargeRangesAreTheWholeBodysBytes(t *testing.T) {
	d := New(Config{})
	get := func(rg string) *httptest.ResponseRecorder {
		r := httptest.NewRequest("GET", "/large/9", nil)
		if rg != "" {
			r.Header.Set("Range", rg)
		}
		w := httptest.NewRecorder()
		d.ServeHTTP(w, r)
		return w
	}
	whole := get("").Body.String()
	if len(whole) != 9<<20 {
		t.Fatalf("whole: %d bytes", len(whole))
	}
	for _, rg := range [][2]int{{0, 0}, {0, 1<<20 - 1}, {fillerSize - 9 - 5, fillerSize + 5}, {3*fillerSize/2 - 1, 2*fillerSize + 100}, {9<<20 - 10, 9<<20 - 1}} {
		w := get(fmt.Sprintf("bytes=%d-%d", rg[0], rg[1]))
		if w.Code != http.StatusPartialContent || w.Body.String() != whole[rg[0]:rg[1]+1] {
			t.Errorf("bytes=%d-%d: %d, %d bytes, equal to the whole body's %v", rg[0], rg[1], w.Code, w.Body.Len(), w.Body.String() == whole[rg[0]:rg[1]+1])
		}
	}
}

// TestHeadIsAnsweredAsGet: a HEAD of a page is its GET without the body
// (it was a 404: chi routes HEAD apart from GET).
func TestHeadIsAnsweredAsGet(t *testing.T) {
	srv := httptest.NewServer(New(Config{}))
	defer srv.Close()
	for _, path := range []string{"/p/1", "/size/100", "/cache/max-age/1"} {
		get, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		_ = get.Body.Close()
		head, err := http.Head(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		_ = head.Body.Close()
		if head.StatusCode != get.StatusCode || head.Header.Get("Cache-Control") != get.Header.Get("Cache-Control") || head.Header.Get("Content-Length") != get.Header.Get("Content-Length") {
			t.Errorf("%s: HEAD %d %q %q, GET %d %q %q", path, head.StatusCode, head.Header.Get("Cache-Control"), head.Header.Get("Content-Length"),
				get.StatusCode, get.Header.Get("Cache-Control"), get.Header.Get("Content-Length"))
		}
	}
}
