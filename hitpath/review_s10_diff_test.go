package hitpath

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/edgecache/edge/internal/e2e"
)

// s10Server serves a handler whose answers match cacheOfOne's for /hit
// (status 200, body "hit"), and echo path and body otherwise, either
// through the loop or by net/http alone.
func s10Server(t *testing.T, withLoop bool, cfg Config) string {
	t.Helper()
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			time.Sleep(150 * time.Millisecond)
		}
		if r.URL.Path == "/hit" && (r.Method == "GET" || r.Method == "HEAD") {
			_, _ = io.WriteString(w, "hit")
			return
		}
		body, _ := io.ReadAll(r.Body)
		_, _ = io.WriteString(w, "net:"+r.Method+" "+r.URL.RequestURI()+" host="+r.Host+" body="+string(body))
	}), ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 10 * time.Second}
	if cfg.IdleTimeout == 0 {
		cfg.IdleTimeout = 10 * time.Second
	}
	if cfg.ReadHeaderTimeout == 0 {
		cfg.ReadHeaderTimeout = 10 * time.Second
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if withLoop {
		l := NewListener(ln, cfg, cacheOfOne{}, nil)
		go func() { _ = l.Serve(srv) }()
	} else {
		go func() { _ = srv.Serve(ln) }()
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	})
	return ln.Addr().String()
}

// s10Transcript sends raw (all at once, or one byte per write when
// split) and returns what came back: one "status body" per response, then
// "EOF" when the server closed, or "open" when it waited.
func s10Transcript(t *testing.T, addr string, raw string, methods []string, split bool) string {
	t.Helper()
	w := func(c net.Conn) {
		if !split {
			_, _ = io.WriteString(c, raw)
			return
		}
		for i := 0; i < len(raw); i++ {
			if _, err := c.Write([]byte{raw[i]}); err != nil {
				return
			}
			time.Sleep(200 * time.Microsecond)
		}
	}
	wait := 700 * time.Millisecond
	if split {
		wait += time.Duration(len(raw)) * time.Millisecond
	}
	return s10TranscriptWith(t, addr, w, methods, wait)
}

// s10TranscriptWith runs write on a new connection and reads the answers,
// waiting at most wait for each.
func s10TranscriptWith(t *testing.T, addr string, write func(net.Conn), methods []string, wait time.Duration) string {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Error(err) // not Fatal: cases run on goroutines of their own (s10Each)
		return "dial: " + err.Error()
	}
	defer c.Close()
	go write(c)
	return e2e.Transcript(c, methods, 0, wait, func(resp *http.Response, b []byte, _ error) string {
		body := string(b)
		if len(body) > 40 {
			body = body[:40] + fmt.Sprintf("…(%d)", len(body))
		}
		if resp.StatusCode >= 400 {
			body = "" // net/http's error bodies are the same either way; keep the status
		}
		return fmt.Sprintf("%d %s", resp.StatusCode, body)
	})
}

type s10Case struct {
	name    string
	raw     string
	methods []string
}

var s10Cases = []s10Case{
	{"plain hit", "GET /hit HTTP/1.1\r\nHost: h\r\n\r\n", nil},
	{"CL+TE on GET", "GET /hit HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET /x HTTP/1.1\r\nHost: h\r\n\r\n", nil},
	{"dup CL on GET", "GET /hit HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhelloGET /x HTTP/1.1\r\nHost: h\r\n\r\n", nil},
	{"comma CL on GET", "GET /hit HTTP/1.1\r\nHost: h\r\nContent-Length: 5, 5\r\n\r\nhelloGET /x HTTP/1.1\r\nHost: h\r\n\r\n", nil},
	{"CL on GET", "GET /hit HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\n\r\nhelloGET /x HTTP/1.1\r\nHost: h\r\n\r\n", nil},
	{"CL 0 on GET", "GET /hit HTTP/1.1\r\nHost: h\r\nContent-Length: 0\r\n\r\nGET /x HTTP/1.1\r\nHost: h\r\n\r\n", nil},
	{"TE chunked,identity", "GET /hit HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked, identity\r\n\r\n0\r\n\r\nGET /x HTTP/1.1\r\nHost: h\r\n\r\n", nil},
	{"TE CHUNKED", "GET /hit HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: CHUNKED\r\n\r\n0\r\n\r\nGET /x HTTP/1.1\r\nHost: h\r\n\r\n", nil},
	{"tRaNsFeR-eNcOdInG", "GET /hit HTTP/1.1\r\nHost: h\r\ntRaNsFeR-eNcOdInG: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\nGET /x HTTP/1.1\r\nHost: h\r\n\r\n", nil},
	{"obs-fold", "GET /hit HTTP/1.1\r\nHost: h\r\nX-A: a\r\n b\r\n\r\nGET /x HTTP/1.1\r\nHost: h\r\n\r\n", nil},
	{"obs-fold TE", "GET /hit HTTP/1.1\r\nHost: h\r\nX-A: a\r\n Transfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET /x HTTP/1.1\r\nHost: h\r\n\r\n", nil},
	{"bare LF first line", "GET /hit HTTP/1.1\nHost: h\r\n\r\nGET /x HTTP/1.1\r\nHost: h\r\n\r\n", nil},
	{"bare LF field", "GET /hit HTTP/1.1\r\nHost: h\nX: y\r\n\r\nGET /x HTTP/1.1\r\nHost: h\r\n\r\n", nil},
	{"bare LF end", "GET /hit HTTP/1.1\r\nHost: h\r\n\nGET /x HTTP/1.1\r\nHost: h\r\n\r\n", nil},
	{"all bare LF", "GET /hit HTTP/1.1\nHost: h\n\nGET /x HTTP/1.1\nHost: h\n\n", nil},
	{"bare CR in value", "GET /hit HTTP/1.1\r\nHost: h\r\nX: a\rContent-Length: 5\r\n\r\nhelloGET /x HTTP/1.1\r\nHost: h\r\n\r\n", nil},
	{"bare CR end", "GET /hit HTTP/1.1\r\nHost: h\r\n\r\r\nGET /x HTTP/1.1\r\nHost: h\r\n\r\n", nil},
	{"NUL in value", "GET /hit HTTP/1.1\r\nHost: h\r\nX: a\x00b\r\n\r\n", nil},
	{"NUL in name", "GET /hit HTTP/1.1\r\nHost: h\r\nX\x00: ab\r\n\r\n", nil},
	{"space before colon", "GET /hit HTTP/1.1\r\nHost: h\r\nContent-Length : 5\r\n\r\nhelloGET /x HTTP/1.1\r\nHost: h\r\n\r\n", nil},
	{"space before colon host", "GET /hit HTTP/1.1\r\nHost : h\r\n\r\n", nil},
	{"tab in value", "GET /hit HTTP/1.1\r\nHost: h\r\nX:\ta\tb\t\r\n\r\n", nil},
	{"obs-text value", "GET /hit HTTP/1.1\r\nHost: h\r\nX: \xff\r\n\r\n", nil},
	{"empty name", "GET /hit HTTP/1.1\r\nHost: h\r\n: x\r\n\r\n", nil},
	{"hit then miss", "GET /hit HTTP/1.1\r\nHost: h\r\n\r\nGET /miss HTTP/1.1\r\nHost: h\r\n\r\nGET /hit HTTP/1.1\r\nHost: h\r\n\r\n", nil},
	{"hit slow hit", "GET /hit HTTP/1.1\r\nHost: h\r\n\r\nGET /slow HTTP/1.1\r\nHost: h\r\n\r\nGET /hit HTTP/1.1\r\nHost: h\r\n\r\nGET /x HTTP/1.1\r\nHost: h\r\n\r\n", nil},
	{"hit then POST", "GET /hit HTTP/1.1\r\nHost: h\r\n\r\nPOST /p HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\n\r\nabcGET /hit HTTP/1.1\r\nHost: h\r\n\r\n", []string{"GET", "POST", "GET"}},
	{"HEAD hit", "HEAD /hit HTTP/1.1\r\nHost: h\r\n\r\nGET /hit HTTP/1.1\r\nHost: h\r\n\r\n", []string{"HEAD", "GET"}},
	{"expect 100", "GET /hit HTTP/1.1\r\nHost: h\r\nExpect: 100-continue\r\n\r\nGET /x HTTP/1.1\r\nHost: h\r\n\r\n", nil},
	{"HTTP/1.0 keep-alive", "GET /hit HTTP/1.0\r\nHost: h\r\nConnection: keep-alive\r\n\r\nGET /x HTTP/1.1\r\nHost: h\r\n\r\n", nil},
	{"HTTP/1.0", "GET /hit HTTP/1.0\r\nHost: h\r\n\r\nGET /x HTTP/1.1\r\nHost: h\r\n\r\n", nil},
	{"absolute form", "GET http://h/hit HTTP/1.1\r\nHost: h\r\n\r\nGET /x HTTP/1.1\r\nHost: h\r\n\r\n", nil},
	{"absolute other host", "GET http://other/hit HTTP/1.1\r\nHost: h\r\n\r\n", nil},
	{"double host", "GET /hit HTTP/1.1\r\nHost: h\r\nHost: i\r\n\r\n", nil},
	{"no host", "GET /hit HTTP/1.1\r\n\r\n", nil},
	{"empty host", "GET /hit HTTP/1.1\r\nHost:\r\n\r\nGET /x HTTP/1.1\r\nHost: h\r\n\r\n", nil},
	{"conn close", "GET /hit HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\nGET /x HTTP/1.1\r\nHost: h\r\n\r\n", nil},
	{"conn CLOSE", "GET /hit HTTP/1.1\r\nHost: h\r\nConnection: CLOSE\r\n\r\nGET /x HTTP/1.1\r\nHost: h\r\n\r\n", nil},
	{"conn close twice", "GET /hit HTTP/1.1\r\nHost: h\r\nConnection: keep-alive\r\nConnection: close\r\n\r\nGET /x HTTP/1.1\r\nHost: h\r\n\r\n", nil},
	{"conn close list", "GET /hit HTTP/1.1\r\nHost: h\r\nConnection: close, x\r\n\r\nGET /x HTTP/1.1\r\nHost: h\r\n\r\n", nil},
	{"miss conn close", "GET /miss HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\nGET /hit HTTP/1.1\r\nHost: h\r\n\r\n", nil},
	{"leading CRLF", "\r\nGET /hit HTTP/1.1\r\nHost: h\r\n\r\n", nil},
	{"two spaces", "GET  /hit HTTP/1.1\r\nHost: h\r\n\r\n", nil},
	{"trailing space version", "GET /hit HTTP/1.1 \r\nHost: h\r\n\r\n", nil},
	{"lowercase version", "GET /hit http/1.1\r\nHost: h\r\n\r\n", nil},
	{"HTTP/1.2", "GET /hit HTTP/1.2\r\nHost: h\r\n\r\n", nil},
	{"get lowercase", "get /hit HTTP/1.1\r\nHost: h\r\n\r\n", nil},
	{"target star", "GET * HTTP/1.1\r\nHost: h\r\n\r\n", nil},
	{"target fragment", "GET /hit#x HTTP/1.1\r\nHost: h\r\n\r\n", nil},
	{"target query", "GET /hit?a=b HTTP/1.1\r\nHost: h\r\n\r\n", nil},
	{"target empty query", "GET /hit? HTTP/1.1\r\nHost: h\r\n\r\n", nil},
	{"target bad escape", "GET /hit%zz HTTP/1.1\r\nHost: h\r\n\r\n", nil},
	{"target //", "GET //hit HTTP/1.1\r\nHost: h\r\n\r\n", nil},
	{"host with port", "GET /hit HTTP/1.1\r\nHost: h:80\r\n\r\n", nil},
	{"host bad", "GET /hit HTTP/1.1\r\nHost: h/x\r\n\r\nGET /x HTTP/1.1\r\nHost: h\r\n\r\n", nil},
	{"host space inside", "GET /hit HTTP/1.1\r\nHost: h x\r\n\r\nGET /x HTTP/1.1\r\nHost: h\r\n\r\n", nil},
	{"upgrade h2c", "GET /hit HTTP/1.1\r\nHost: h\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\r\n\r\n", nil},
	{"GET body no CL", "GET /hit HTTP/1.1\r\nHost: h\r\n\r\nhelloGET /x HTTP/1.1\r\nHost: h\r\n\r\n", nil},
	{"hit, miss then garbage", "GET /hit HTTP/1.1\r\nHost: h\r\n\r\nGET /miss HTTP/1.1\r\nHost: h\r\n\r\nGARBAGE\r\n\r\n", nil},
	{"hit, then bad", "GET /hit HTTP/1.1\r\nHost: h\r\n\r\nGET /hit HTTP/1.1\r\nHost: h\r\nHost: i\r\n\r\nGET /x HTTP/1.1\r\nHost: h\r\n\r\n", nil},
	{"keep-alive field", "GET /hit HTTP/1.1\r\nHost: h\r\nKeep-Alive: timeout=5\r\n\r\nGET /x HTTP/1.1\r\nHost: h\r\n\r\n", nil},
	{"proxy-connection", "GET /hit HTTP/1.1\r\nHost: h\r\nProxy-Connection: close\r\n\r\nGET /x HTTP/1.1\r\nHost: h\r\n\r\n", nil},
	{"TE header", "GET /hit HTTP/1.1\r\nHost: h\r\nTE: trailers\r\n\r\nGET /x HTTP/1.1\r\nHost: h\r\n\r\n", nil},
	{"chunked HEAD", "HEAD /hit HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\nGET /x HTTP/1.1\r\nHost: h\r\n\r\n", []string{"HEAD"}},
	{"ctl in target", "GET /hi\x01t HTTP/1.1\r\nHost: h\r\n\r\n", nil},
	{"tab in request line", "GET\t/hit HTTP/1.1\r\nHost: h\r\n\r\n", nil},
	{"tab sep target", "GET /hit\tHTTP/1.1\r\nHost: h\r\n\r\n", nil},
	{"host tab", "GET /hit HTTP/1.1\r\nHost:\th\t\r\n\r\n", nil},
	{"X-Forwarded-Host", "GET /hit HTTP/1.1\r\nHost: h\r\nX-Forwarded-Host: evil\r\n\r\n", nil},
}

// TestS10DifferentialRawBytes sends each case to net/http alone and to the
// loop in front of it (whose cache answers /hit exactly as the handler
// does), whole and split into one-byte writes, and compares transcripts.
func TestS10DifferentialRawBytes(t *testing.T) {
	plain := s10Server(t, false, Config{})
	loop := s10Server(t, true, Config{})
	s10Each(2*len(s10Cases), func(i int) {
		tc, split := s10Cases[i/2], i%2 == 1
		want, got := s10Pair(
			func() string { return s10Transcript(t, plain, tc.raw, tc.methods, split) },
			func() string { return s10Transcript(t, loop, tc.raw, tc.methods, split) })
		if got != want {
			t.Errorf("%s (split %v), bytes %q:\n net/http alone: %s\n with the loop:  %s", tc.name, split, tc.raw, want, got)
		}
	})
}

// s10Each runs f for every i below n, sixteen at a time: a case mostly
// waits for a read deadline (a connection left open), and one after
// another they took 86 s of make test under the race detector.
func s10Each(n int, f func(i int)) {
	var wg sync.WaitGroup
	slots := make(chan struct{}, 16)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			slots <- struct{}{}
			defer func() { <-slots }()
			f(i)
		}()
	}
	wg.Wait()
}

// s10Pair takes the two transcripts at once.
func s10Pair(a, b func() string) (string, string) {
	var x, y string
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); x = a() }()
	go func() { defer wg.Done(); y = b() }()
	wg.Wait()
	return x, y
}
