package proxy

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// rawExchange sends raw to a real net/http server and reads one response.
func rawExchange(t *testing.T, addr, raw, method string) (*http.Response, []byte) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, raw); err != nil {
		t.Fatal(err)
	}
	return readResponse(t, bufio.NewReader(c), method)
}

func readResponse(t *testing.T, br *bufio.Reader, method string) (*http.Response, []byte) {
	t.Helper()
	resp, err := http.ReadResponse(br, &http.Request{Method: method})
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, body
}

// TestAppendHitMatchesServeHTTP is the hit path's differential test: for
// each stored response and request shape, the bytes AppendHit writes must
// read back as the same status, fields and body net/http writes for
// ServeHTTP; where ServeHTTP would not answer with a plain fresh hit,
// AppendHit must decline.
func TestAppendHitMatchesServeHTTP(t *testing.T) {
	p := newTestProxy(t, withCompression)
	srv := httptest.NewServer(p.h)
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")
	html := page(4096)
	cases := []struct {
		name    string
		origin  originResp
		reqHdr  string // extra request fields, CRLF-terminated
		head    bool
		close   bool
		decline bool
		prepare func()
	}{
		{name: "small text", origin: originResp{header: map[string]string{"Cache-Control": "max-age=60", "Content-Type": "text/plain"}, body: "hello"}},
		{name: "no content type", origin: originResp{header: map[string]string{"Cache-Control": "max-age=60"}, body: "x"}},
		{name: "odd fields", origin: originResp{header: map[string]string{"Cache-Control": "public, max-age=60", "X-Tab": "a\tb", "Etag": `"v1"`, "Link": "</a>; rel=preload"}, body: "y"}},
		{name: "html identity", origin: originResp{header: map[string]string{"Cache-Control": "max-age=60", "Content-Type": "text/html"}, body: html}},
		{name: "html gzip", origin: originResp{header: map[string]string{"Cache-Control": "max-age=60", "Content-Type": "text/html"}, body: html}, reqHdr: "Accept-Encoding: gzip\r\n"},
		{name: "html br", origin: originResp{header: map[string]string{"Cache-Control": "max-age=60", "Content-Type": "text/html"}, body: html}, reqHdr: "Accept-Encoding: gzip, deflate, br, zstd\r\n"},
		{name: "html refuses gzip", origin: originResp{header: map[string]string{"Cache-Control": "max-age=60", "Content-Type": "text/html"}, body: html}, reqHdr: "Accept-Encoding: gzip;q=0, identity\r\n"},
		{name: "html two fields", origin: originResp{header: map[string]string{"Cache-Control": "max-age=60", "Content-Type": "text/html"}, body: html}, reqHdr: "Accept-Encoding: foo\r\nAccept-Encoding: br\r\n"},
		{name: "head", origin: originResp{header: map[string]string{"Cache-Control": "max-age=60", "Content-Type": "text/html"}, body: html}, head: true},
		{name: "close", origin: originResp{header: map[string]string{"Cache-Control": "max-age=60"}, body: "z"}, close: true},
		{name: "404", origin: originResp{status: 404, header: map[string]string{"Cache-Control": "max-age=60"}, body: "gone"}},
		{name: "301", origin: originResp{status: 301, header: map[string]string{"Cache-Control": "max-age=60", "Location": "/elsewhere"}}},
		{name: "vary", origin: originResp{header: map[string]string{"Cache-Control": "max-age=60", "Vary": "Accept-Language"}, body: "v"}, decline: true},
		{name: "private", origin: originResp{header: map[string]string{"Cache-Control": "private, max-age=60"}, body: "mine"}, decline: true},
		{name: "no-cache", origin: originResp{header: map[string]string{"Cache-Control": "no-cache, max-age=60"}, body: "nc"}, decline: true},
		{name: "expired", origin: originResp{header: map[string]string{"Cache-Control": "max-age=1"}, body: "old"}, decline: true,
			prepare: func() { p.clk.Set(p.clk.Now().Add(5 * time.Second)) }},
		{name: "large", origin: originResp{header: map[string]string{"Cache-Control": "max-age=60", "Content-Type": "application/octet-stream"}, body: strings.Repeat("b", 3*writeChunk+1)}},
		{name: "large html br", origin: originResp{header: map[string]string{"Cache-Control": "max-age=60", "Content-Type": "text/html"}, body: page(5 * writeChunk)}, reqHdr: "Accept-Encoding: br\r\n"},
		{name: "large head", origin: originResp{header: map[string]string{"Cache-Control": "max-age=60"}, body: strings.Repeat("h", 2*writeChunk)}, head: true},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			path := "/case" + string(rune('a'+i))
			p.origin.set(c.origin)
			p.do("GET", path, nil)
			if c.prepare != nil {
				c.prepare()
			}
			method := "GET"
			if c.head {
				method = "HEAD"
			}
			raw := method + " " + path + " HTTP/1.1\r\nHost: example.com\r\n" + c.reqHdr
			hr := HitRequest{Head: c.head, Host: "example.com", Path: path, Close: c.close}
			for line := range strings.SplitSeq(strings.TrimSuffix(c.reqHdr, "\r\n"), "\r\n") {
				if v, ok := strings.CutPrefix(line, "Accept-Encoding: "); ok {
					hr.Accept = append(hr.Accept, v)
				}
			}
			if c.close {
				raw += "Connection: close\r\n"
			}
			raw += "\r\n"
			var a HitAnswer
			ok := p.h.AppendHit([]byte("prefix"), &hr, []byte("Date: Mon, 02 Jan 2006 15:04:05 GMT\r\n"), &a)
			if c.decline {
				if ok {
					t.Fatalf("AppendHit answered a request ServeHTTP does not answer with a fresh hit:\n%s", a.Head)
				}
				return
			}
			if !ok && !c.decline {
				// A coded form is made for ServeHTTP (charged to the buffer
				// budget, in the background), never by the hit path: the
				// first request for it goes there, and the hit path serves
				// it once it is made.
				rawExchange(t, addr, raw, method)
				p.h.Wait() // the form is made in the background
				ok = p.h.AppendHit([]byte("prefix"), &hr, []byte("Date: Mon, 02 Jan 2006 15:04:05 GMT\r\n"), &a)
			}
			if !ok {
				t.Fatal("AppendHit declined a fresh hit")
			}
			out, status := append(a.Head, a.Body...), a.Status
			p.h.ReleaseHit(a.Pinned, a.ClientIP)
			want, wantBody := rawExchange(t, addr, raw, method)
			got, gotBody := readResponse(t, bufio.NewReader(bytes.NewReader(out[len("prefix"):])), method)
			if got.StatusCode != want.StatusCode || status != want.StatusCode {
				t.Errorf("status %d (%d), ServeHTTP %d", got.StatusCode, status, want.StatusCode)
			}
			if !bytes.Equal(gotBody, wantBody) {
				t.Errorf("body of %d bytes, ServeHTTP %d", len(gotBody), len(wantBody))
			}
			if got.Close != want.Close || got.ContentLength != want.ContentLength {
				t.Errorf("close %v length %d, ServeHTTP %v %d", got.Close, got.ContentLength, want.Close, want.ContentLength)
			}
			if want.Header.Get("Cache-Status") != p.h.HitStatus() {
				t.Fatalf("ServeHTTP's answer is not a fresh hit: %q", want.Header.Get("Cache-Status"))
			}
			names := map[string]bool{}
			for k := range want.Header {
				names[k] = true
			}
			for k := range got.Header {
				names[k] = true
			}
			for k := range names {
				g, w := got.Header[k], want.Header[k]
				if !slices.Equal(g, w) {
					t.Errorf("%s: %q, ServeHTTP %q", k, g, w)
				}
			}
		})
	}
}

// TestAppendHitDeclinesSoftPurged: a soft purge marks the entry stale, and
// the hit path must leave its revalidation to ServeHTTP.
func TestAppendHitDeclinesSoftPurged(t *testing.T) {
	p := newTestProxy(t, nil)
	p.origin.set(originResp{header: map[string]string{"Cache-Control": "max-age=600"}, body: "x"})
	p.do("GET", "/p", nil)
	hr := HitRequest{Host: "example.com", Path: "/p"}
	var a HitAnswer
	if !p.h.AppendHit(nil, &hr, nil, &a) {
		t.Fatal("fresh hit declined")
	}
	p.h.ReleaseHit(a.Pinned, a.ClientIP)
	e, _ := p.h.store.LookupFunc(p.h.key("http", "example.com", "/p", ""), func([]string) string { return "" }, nil, true)
	e.MarkStale()
	if p.h.AppendHit(nil, &hr, nil, &a) {
		t.Fatalf("a soft-purged entry was served by the hit path:\n%s", a.Head)
	}
}

// BenchmarkAppendHit is the proxy's share of a hit on the HTTP/1.1 hit
// path: key, lookup, freshness, head and body into a reused buffer.
func BenchmarkAppendHit(b *testing.B) {
	p := newTestProxy(b, nil)
	p.origin.set(originResp{header: map[string]string{"Cache-Control": "max-age=3600", "Content-Type": "application/octet-stream"}, body: strings.Repeat("x", 4096)})
	p.do("GET", "/size/4096", nil)
	benchAppendHit(b, p, &HitRequest{Host: "example.com", Path: "/size/4096"})
}

// benchAppendHit measures AppendHit answering hr, a fresh hit.
func benchAppendHit(b *testing.B, p *testProxy, hr *HitRequest) {
	date := []byte("Date: Mon, 02 Jan 2006 15:04:05 GMT\r\n")
	buf := make([]byte, 0, 8192)
	var a HitAnswer
	b.ReportAllocs()
	for b.Loop() {
		if !p.h.AppendHit(buf[:0], hr, date, &a) {
			b.Fatal("not a hit")
		}
		p.h.ReleaseHit(a.Pinned, a.ClientIP)
		buf = a.Head
	}
}

// TestAppendHitPinsALargeBody: an entry evicted while the hit path writes
// its large body stays charged to the buffer budget until the answer is
// released, as on ServeHTTP's path.
func TestAppendHitPinsALargeBody(t *testing.T) {
	p := newTestProxy(t, nil)
	p.origin.set(originResp{header: map[string]string{"Cache-Control": "max-age=600"}, body: strings.Repeat("L", 4*writeChunk)})
	p.do("GET", "/large", nil)
	hr := HitRequest{Host: "example.com", Path: "/large"}
	var a HitAnswer
	if !p.h.AppendHit(nil, &hr, nil, &a) || len(a.Body) != 4*writeChunk || a.BodyBytes != 4*writeChunk || a.Pinned == nil {
		t.Fatalf("large hit: body %d bytes in the answer", len(a.Body))
	}
	if n := p.h.store.Remove(p.h.key("http", "example.com", "/large", "")); n != 1 {
		t.Fatalf("removed %d entries", n)
	}
	if p.h.Buffered() < int64(4*writeChunk) {
		t.Fatalf("an evicted entry being written is charged %d bytes", p.h.Buffered())
	}
	p.h.ReleaseHit(a.Pinned, a.ClientIP)
	if p.h.Buffered() != 0 {
		t.Fatalf("%d bytes still charged after the write", p.h.Buffered())
	}
}

// splicingFetcher answers as the cluster does when it finished a peer's
// broken answer from the origin: Result.Resumed says so.
type splicingFetcher struct{}

func (splicingFetcher) Fetch(ctx context.Context, fr FetchRequest) (Result, error) {
	resp := &http.Response{StatusCode: 200, Header: http.Header{"Cache-Control": {"max-age=60"}, "Etag": {`"v1"`}},
		Body: io.NopCloser(strings.NewReader("whole page")), ContentLength: -1}
	return Result{Resp: resp, Keep: true, Resumed: func() bool { return true }}, nil
}

// TestResumedBodyIsServedNotStored: a body the cluster finished from the
// origin after a peer's answer broke is served whole but never stored
// (its first part was never authenticated).
func TestResumedBodyIsServedNotStored(t *testing.T) {
	store := NewStore(1<<20, 4)
	f := splicingFetcher{}
	h := New(DefaultConfig(), store, f, NewMetrics(prometheus.NewRegistry(), store), nil)
	for range 2 {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest("GET", "http://example.com/r", nil))
		h.Wait()
		if w.Body.String() != "whole page" || !strings.Contains(w.Header().Get("Cache-Status"), "fwd=") {
			t.Fatalf("answer %q, Cache-Status %q", w.Body.String(), w.Header().Get("Cache-Status"))
		}
	}
	if st := store.Stats(); st.Objects != 0 {
		t.Fatalf("a resumed body was stored (%d objects)", st.Objects)
	}
}
