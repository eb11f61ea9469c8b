package proxy

// A review found (now mended): after an origin answered a streamed upload
// early, stream removed the Connection: close dropUnreadBody had set, so the
// connection was kept while the body's read deadline stood in the past:
// net/http parsed the rest of the body as requests (some reached the
// origin) or cancelled the next request (502 client-gone). closingWriter
// (proxy/limits.go) now sets the field as the header is written.
//
// A hostile review (s36) of request-body framing after c67e044: whatever
// the edge answers to a request with a body (an origin's early answer, its
// own refusals), the rest of that body must never be read as a request,
// and a later request on the connection must get exactly its own answer.

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

const s36Smuggle = "GET /smuggled HTTP/1.1\r\nHost: smuggle.test\r\n\r\n"

// s36Body is n bytes made of complete requests.
func s36Body(n int) []byte {
	b := []byte(strings.Repeat(s36Smuggle, n/len(s36Smuggle)+1))
	return b[:n]
}

// s36Chunked frames body as chunks of at most step bytes.
func s36Chunked(body []byte, step int, trailer string) []byte {
	var sb strings.Builder
	for len(body) > 0 {
		k := min(step, len(body))
		fmt.Fprintf(&sb, "%x\r\n%s\r\n", k, body[:k])
		body = body[k:]
	}
	sb.WriteString("0\r\n" + trailer + "\r\n")
	return []byte(sb.String())
}

// s36Origin answers by path, counting requests written inside bodies.
type s36Origin struct {
	srv      *httptest.Server
	smuggled atomic.Int64
	hang     chan struct{}
}

func newS36Origin(t testing.TB) *s36Origin {
	o := &s36Origin{hang: make(chan struct{})}
	o.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/smuggled") || r.Host == "smuggle.test" {
			o.smuggled.Add(1)
		}
		w.Header().Set("Cache-Control", "no-store")
		p := r.URL.Path
		switch {
		case strings.HasPrefix(p, "/after"):
			_, _ = io.WriteString(w, "after:"+r.Method+":"+p)
		case strings.HasPrefix(p, "/cached"):
			w.Header().Set("Cache-Control", "max-age=600")
			_, _ = io.WriteString(w, "cached:"+p)
		case strings.HasPrefix(p, "/403"):
			w.WriteHeader(http.StatusForbidden)
		case strings.HasPrefix(p, "/401"):
			w.Header().Set("WWW-Authenticate", "Basic")
			w.WriteHeader(http.StatusUnauthorized)
		case strings.HasPrefix(p, "/413"):
			w.WriteHeader(http.StatusRequestEntityTooLarge)
		case strings.HasPrefix(p, "/302"):
			http.Redirect(w, r, "/elsewhere", http.StatusFound)
		case strings.HasPrefix(p, "/big403"):
			// An early answer larger than net/http's buffer: flushed while
			// the upload is still coming.
			w.WriteHeader(http.StatusForbidden)
			_, _ = w.Write([]byte(strings.Repeat("x", 200<<10)))
		case strings.HasPrefix(p, "/hang"):
			<-o.hang
		default: // read it all
			b, _ := io.ReadAll(r.Body)
			_, _ = fmt.Fprintf(w, "read:%d", len(b))
		}
	}))
	t.Cleanup(o.srv.Close)
	return o
}

type s36Probe struct {
	addr      string
	tls       bool
	head      string // request head (without the blank line's end? no: whole head)
	body      []byte
	pipeline  bool          // write the follow-up right behind the body
	pause     time.Duration // between head and body (Expect: 100-continue)
	partial   bool          // send only half the body, then wait for the answer
	afterPath string
}

type s36Result struct {
	status  int
	closed  bool // the answer said Connection: close
	problem string
	info    []int
}

func s36Dial(t testing.TB, addr string, useTLS bool) net.Conn {
	t.Helper()
	var c net.Conn
	var err error
	if useTLS {
		c, err = tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"http/1.1"}})
	} else {
		c, err = net.Dial("tcp", addr)
	}
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// run sends p and judges what comes back: after the answer either nothing
// more comes and the connection closes, or the follow-up gets its own
// answer.
func (p s36Probe) run(t testing.TB) s36Result {
	t.Helper()
	c := s36Dial(t, p.addr, p.tls)
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(8 * time.Second))
	after := p.afterPath
	if after == "" {
		after = "/after"
	}
	follow := "GET " + after + " HTTP/1.1\r\nHost: example.test\r\n\r\n"
	wrote := make(chan error, 1)
	var wmu sync.Mutex
	go func() {
		wmu.Lock()
		defer wmu.Unlock()
		if _, err := io.WriteString(c, p.head); err != nil {
			wrote <- err
			return
		}
		if p.pause > 0 {
			time.Sleep(p.pause)
		}
		body := p.body
		if p.partial {
			body = body[:len(body)/2]
		}
		msg := append([]byte(nil), body...)
		if p.pipeline && !p.partial {
			msg = append(msg, follow...)
		}
		_, err := c.Write(msg)
		wrote <- err
	}()
	br := bufio.NewReader(c)
	var res s36Result
	var resp *http.Response
	method, _, _ := strings.Cut(p.head, " ")
	for {
		r, err := http.ReadResponse(br, &http.Request{Method: method})
		if err != nil {
			res.problem = fmt.Sprintf("no answer: %v", err)
			return res
		}
		if r.StatusCode >= 100 && r.StatusCode < 200 {
			res.info = append(res.info, r.StatusCode)
			continue
		}
		resp = r
		break
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	res.status, res.closed = resp.StatusCode, resp.Close
	if res.closed {
		rest, _ := io.ReadAll(br)
		if len(rest) > 0 {
			res.problem = fmt.Sprintf("after a Connection: close answer, more came: %q", firstLine(rest))
		}
		return res
	}
	if p.partial {
		// Kept open with half a body sent: the connection must still be
		// waiting for the rest of that body, so a request written now is
		// body bytes, not a request; send the rest and the follow-up.
		<-wrote
		rest := append(append([]byte(nil), p.body[len(p.body)/2:]...), follow...)
		if _, err := c.Write(rest); err != nil {
			return res // closed under us: nothing parsed
		}
	} else if !p.pipeline {
		select {
		case err := <-wrote:
			if err != nil {
				res.problem = fmt.Sprintf("kept open, but the body's write failed: %v", err)
				return res
			}
		case <-time.After(5 * time.Second):
			res.problem = "kept open, but the rest of the body is not read"
			return res
		}
		if _, err := io.WriteString(c, follow); err != nil {
			// Closed without saying so: nothing was parsed.
			return res
		}
	}
	next, err := http.ReadResponse(br, nil)
	if err != nil {
		if err == io.EOF || strings.Contains(err.Error(), "reset") || strings.Contains(err.Error(), "EOF") {
			return res // closed after all: acceptable (nothing parsed from the body)
		}
		res.problem = fmt.Sprintf("the follow-up got no answer: %v", err)
		return res
	}
	got, _ := io.ReadAll(next.Body)
	next.Body.Close()
	want := "after:GET:" + after
	if next.StatusCode != http.StatusOK || string(got) != want {
		res.problem = fmt.Sprintf("the follow-up got %d %q (fields %v), want %q", next.StatusCode, got, next.Header, want)
	}
	return res
}

type s36Front struct {
	plain, tls string
	origin     *s36Origin
	h          *Handler
}

func newS36Front(t testing.TB, mod func(*Config)) *s36Front {
	o := newS36Origin(t)
	h := proxyFor(t, o.srv.URL, mod)
	plain := httptest.NewServer(h)
	t.Cleanup(plain.Close)
	ts := httptest.NewUnstartedServer(h)
	ts.EnableHTTP2 = false
	ts.StartTLS()
	t.Cleanup(ts.Close)
	return &s36Front{plain: plain.Listener.Addr().String(), tls: ts.Listener.Addr().String(), origin: o, h: h}
}

func (f *s36Front) addr(useTLS bool) string {
	if useTLS {
		return f.tls
	}
	return f.plain
}

var s36Sizes = []int{1 << 10, 64<<10 + 1, 256<<10 + 1, 1 << 20} // under, over the memory buffer, over net/http's 256 KiB discard, large

// TestS36EarlyAnswersToUploads: origins answering an upload early (or
// reading it) under each way of carrying a body, both framings, plain and
// TLS, with the follow-up sent after the answer or pipelined behind the
// body.
func TestS36EarlyAnswersToUploads(t *testing.T) {
	configs := []struct {
		name string
		mod  func(*Config)
	}{
		{"buffered", nil},
		{"nospool", func(c *Config) { c.SpoolBytes = 0; c.SpoolDir = "" }},
		{"streaming", func(c *Config) { c.RequestBuffering = false }},
		{"streaming-nobodytimeout", func(c *Config) { c.RequestBuffering = false; c.BodyTimeout = 0 }},
		{"buffered-nobodytimeout-nospool", func(c *Config) { c.BodyTimeout = 0; c.SpoolBytes = 0; c.SpoolDir = "" }},
	}
	for _, cf := range configs {
		t.Run(cf.name, func(t *testing.T) {
			t.Parallel()
			f := newS36Front(t, cf.mod)
			var mu sync.Mutex
			kept, closed := 0, 0
			var wg sync.WaitGroup
			sem := make(chan struct{}, 8)
			for _, useTLS := range []bool{false, true} {
				for _, path := range []string{"/403", "/302", "/big403", "/read"} { // 401 and 413 answer as 403 does
					for _, size := range s36Sizes {
						for _, chunked := range []bool{false, true} {
							for _, pipe := range []bool{false, true} {
								head := fmt.Sprintf("POST %s HTTP/1.1\r\nHost: example.test\r\n", path)
								body := s36Body(size)
								if chunked {
									head += "Transfer-Encoding: chunked\r\n\r\n"
									body = s36Chunked(body, 16<<10, "")
								} else {
									head += fmt.Sprintf("Content-Length: %d\r\n\r\n", size)
								}
								name := fmt.Sprintf("tls=%v %s size=%d chunked=%v pipelined=%v", useTLS, path, size, chunked, pipe)
								wg.Add(1)
								sem <- struct{}{}
								go func() {
									defer wg.Done()
									defer func() { <-sem }()
									res := s36Probe{addr: f.addr(useTLS), tls: useTLS, head: head, body: body, pipeline: pipe}.run(t)
									mu.Lock()
									defer mu.Unlock()
									if res.closed {
										closed++
									} else {
										kept++
									}
									if res.problem != "" {
										t.Errorf("%s: answered %d: %s", name, res.status, res.problem)
									}
								}()
							}
						}
					}
				}
			}
			wg.Wait()
			t.Logf("%d kept open, %d closed", kept, closed)
			if n := f.origin.smuggled.Load(); n > 0 {
				t.Errorf("%d requests written inside bodies reached the origin", n)
			}
		})
	}
}

// TestS36EdgeRefusalsOfRequestsWithBodies: every answer the handler gives
// itself to a request with a body.
func TestS36EdgeRefusalsOfRequestsWithBodies(t *testing.T) {
	f := newS36Front(t, func(c *Config) { c.MaxBodyBytes = 100 << 10; c.MaxURLBytes = 200 })
	// Fill a cached page, for GETs with bodies that hit.
	if r, _, _ := rvRawExchange(t, f.plain, "GET /cached/a HTTP/1.1\r\nHost: example.test\r\n\r\n", 5*time.Second); r.StatusCode != 200 {
		t.Fatalf("fill: %d", r.StatusCode)
	}
	f.h.Wait()
	long := "/x?" + strings.Repeat("a", 300)
	cases := []struct {
		method, path string
	}{
		{"GET", "/cached/a"}, {"HEAD", "/cached/a"}, {"GET", "/cached/miss"}, {"GET", "/403"},
		{"OPTIONS", "/read"}, {"DELETE", "/403"}, {"TRACE", "/read"}, {"POST", long}, {"POST", "/x?a#b"},
		{"PUT", "/403"}, {"PATCH", "/302"},
	}
	for _, useTLS := range []bool{false, true} {
		for _, c := range cases {
			for _, size := range []int{10, 150 << 10, 300 << 10} {
				for _, chunked := range []bool{false, true} {
					for _, pipe := range []bool{false, true} {
						head := fmt.Sprintf("%s %s HTTP/1.1\r\nHost: example.test\r\n", c.method, c.path)
						body := s36Body(size)
						if chunked {
							head += "Transfer-Encoding: chunked\r\n\r\n"
							body = s36Chunked(body, 8<<10, "")
						} else {
							head += fmt.Sprintf("Content-Length: %d\r\n\r\n", size)
						}
						res := s36Probe{addr: f.addr(useTLS), tls: useTLS, head: head, body: body, pipeline: pipe}.run(t)
						if res.problem != "" {
							t.Errorf("tls=%v %s %.30s size=%d chunked=%v pipelined=%v: answered %d: %s", useTLS, c.method, c.path, size, chunked, pipe, res.status, res.problem)
						}
					}
				}
			}
		}
	}
	if n := f.origin.smuggled.Load(); n > 0 {
		t.Errorf("%d requests written inside bodies reached the origin", n)
	}
}

// TestS36BadChunkedAndTrailers: a malformed chunked body (400) and a good
// one with trailers, each with requests behind them.
func TestS36BadChunkedAndTrailers(t *testing.T) {
	for _, streaming := range []bool{false, true} {
		f := newS36Front(t, func(c *Config) { c.RequestBuffering = !streaming })
		bodies := map[string][]byte{
			"bad-size":        []byte("zz\r\n" + s36Smuggle + "\r\n0\r\n\r\n"),
			"short-chunk":     []byte("100\r\n" + s36Smuggle + "\r\n0\r\n\r\n" + strings.Repeat(s36Smuggle, 10)),
			"bare-lf":         []byte("5\nhello\n0\n\n" + s36Smuggle),
			"ext":             []byte("5;a=b\r\nhello\r\n0\r\n\r\n"),
			"trailer":         s36Chunked(s36Body(3000), 1000, "X-T: 1\r\n"),
			"trailer-smuggle": s36Chunked(s36Body(3000), 1000, "X-T: 1\r\nContent-Length: 5\r\n"),
			"big-after-bad":   append([]byte("10\r\n"+strings.Repeat("A", 16)+"\r\nqq\r\n"), s36Body(300<<10)...),
			"oversize-hex":    []byte("ffffffffffffffffff\r\n" + s36Smuggle + "\r\n0\r\n\r\n"),
		}
		for name, body := range bodies {
			for _, path := range []string{"/read", "/403"} {
				for _, pipe := range []bool{false, true} {
					head := "POST " + path + " HTTP/1.1\r\nHost: example.test\r\nTransfer-Encoding: chunked\r\n\r\n"
					res := s36Probe{addr: f.plain, head: head, body: body, pipeline: pipe}.run(t)
					t.Logf("streaming=%v %s %s pipelined=%v: %d close=%v", streaming, name, path, pipe, res.status, res.closed)
					if res.problem != "" {
						t.Errorf("streaming=%v %s %s pipelined=%v: answered %d: %s", streaming, name, path, pipe, res.status, res.problem)
					}
				}
			}
		}
		if n := f.origin.smuggled.Load(); n > 0 {
			t.Errorf("streaming=%v: %d requests written inside bodies reached the origin", streaming, n)
		}
	}
}

// TestS36ExpectContinue: Expect: 100-continue with origins that read and
// that answer early, the body sent after the interim answer (or a pause).
func TestS36ExpectContinue(t *testing.T) {
	for _, streaming := range []bool{false, true} {
		f := newS36Front(t, func(c *Config) { c.RequestBuffering = !streaming })
		var wg sync.WaitGroup
		for _, path := range []string{"/read", "/403", "/302"} {
			for _, size := range []int{10, 100 << 10, 300 << 10} {
				for _, chunked := range []bool{false, true} {
					head := "POST " + path + " HTTP/1.1\r\nHost: example.test\r\nExpect: 100-continue\r\n"
					body := s36Body(size)
					if chunked {
						head += "Transfer-Encoding: chunked\r\n\r\n"
						body = s36Chunked(body, 8<<10, "")
					} else {
						head += fmt.Sprintf("Content-Length: %d\r\n\r\n", size)
					}
					for _, pipe := range []bool{false, true} {
						wg.Add(1)
						go func() {
							defer wg.Done()
							res := s36Probe{addr: f.plain, head: head, body: body, pipeline: pipe, pause: 300 * time.Millisecond}.run(t)
							if res.problem != "" {
								t.Errorf("streaming=%v %s size=%d chunked=%v pipelined=%v: answered %d (1xx %v): %s", streaming, path, size, chunked, pipe, res.status, res.info, res.problem)
							}
						}()
					}
				}
			}
		}
		wg.Wait()
		if n := f.origin.smuggled.Load(); n > 0 {
			t.Errorf("streaming=%v: %d requests written inside bodies reached the origin", streaming, n)
		}
	}
}

// TestS36ClientLimitRefusesUploads: the per-client bound's 429 to an
// upload, while the client's other request holds its slot.
func TestS36ClientLimitRefusesUploads(t *testing.T) {
	f := newS36Front(t, func(c *Config) { c.MaxInflightPerClient = 1 })
	hold := s36Dial(t, f.plain, false)
	defer func() { close(f.origin.hang); hold.Close() }()
	_, _ = io.WriteString(hold, "GET /hang HTTP/1.1\r\nHost: example.test\r\n\r\n")
	time.Sleep(200 * time.Millisecond)
	saw429 := false
	for _, size := range []int{10, 100 << 10, 300 << 10} {
		for _, chunked := range []bool{false, true} {
			for _, pipe := range []bool{false, true} {
				head := "POST /read HTTP/1.1\r\nHost: example.test\r\n"
				body := s36Body(size)
				if chunked {
					head += "Transfer-Encoding: chunked\r\n\r\n"
					body = s36Chunked(body, 8<<10, "")
				} else {
					head += fmt.Sprintf("Content-Length: %d\r\n\r\n", size)
				}
				res := s36Probe{addr: f.plain, head: head, body: body, pipeline: pipe, afterPath: "/after"}.run(t)
				if res.status == http.StatusTooManyRequests {
					saw429 = true
				}
				// The follow-up gets a 429 as well, while /hang holds the
				// slot: judged by status only here.
				if res.problem != "" && !strings.Contains(res.problem, "got 429") {
					t.Errorf("size=%d chunked=%v pipelined=%v: answered %d: %s", size, chunked, pipe, res.status, res.problem)
				}
			}
		}
	}
	if !saw429 {
		t.Errorf("the per-client bound never refused")
	}
	if n := f.origin.smuggled.Load(); n > 0 {
		t.Errorf("%d requests written inside bodies reached the origin", n)
	}
}

// TestS36SlowBodyThenRest: a body that stops (408), then its rest, made of
// requests, sent on the same connection.
func TestS36SlowBodyThenRest(t *testing.T) {
	f := newS36Front(t, func(c *Config) { c.BodyTimeout = 300 * time.Millisecond; c.MinBodyRate = 1 << 20 })
	for _, path := range []string{"/read", "/403"} {
		for _, chunked := range []bool{false, true} {
			size := 40 << 10
			head := "POST " + path + " HTTP/1.1\r\nHost: example.test\r\n"
			body := s36Body(size)
			if chunked {
				head += "Transfer-Encoding: chunked\r\n\r\n"
				body = s36Chunked(body, 4<<10, "")
			} else {
				head += fmt.Sprintf("Content-Length: %d\r\n\r\n", size)
			}
			res := s36Probe{addr: f.plain, head: head, body: body, partial: true}.run(t)
			t.Logf("%s chunked=%v: %d close=%v", path, chunked, res.status, res.closed)
			if res.problem != "" {
				t.Errorf("%s chunked=%v: answered %d: %s", path, chunked, res.status, res.problem)
			}
		}
	}
	if n := f.origin.smuggled.Load(); n > 0 {
		t.Errorf("%d requests written inside bodies reached the origin", n)
	}
}

// s36Classify runs pipelined uploads of 256 KiB and 300 000 bytes, each
// answered early by the origin, for up to budget, and counts the follow-ups
// answered as anything but themselves: by what the edge parsed out of the
// body (a 400 from net/http, another request's answer) or cancelled
// (502 client-gone).
func s36Classify(t *testing.T, addrs []string, budget time.Duration) (runs, parsed, cancelled int, first map[string]string) {
	return s36ClassifyMode(t, addrs, budget, true, false)
}

func s36ClassifyMode(t *testing.T, addrs []string, budget time.Duration, pipeline, chunked bool) (runs, parsed, cancelled int, first map[string]string) {
	first = map[string]string{}
	end := time.Now().Add(budget)
	for i := 0; time.Now().Before(end); i++ {
		for k, addr := range addrs {
			size := 256 << 10
			if i%2 == 1 {
				size = 300000
			}
			path := []string{"/302", "/403"}[(i/2)%2]
			head := fmt.Sprintf("POST %s/%d HTTP/1.1\r\nHost: example.test\r\nContent-Length: %d\r\n\r\n", path, i, size)
			body := s36Body(size)
			if chunked {
				head = fmt.Sprintf("POST %s/%d HTTP/1.1\r\nHost: example.test\r\nTransfer-Encoding: chunked\r\n\r\n", path, i)
				body = s36Chunked(body, 32<<10, "")
			}
			res := s36Probe{addr: addr, tls: k == 1, head: head, body: body, pipeline: pipeline}.run(t)
			runs++
			switch {
			case res.problem == "":
			case strings.Contains(res.problem, "client-gone"):
				cancelled++
				if first["cancelled"] == "" {
					first["cancelled"] = fmt.Sprintf("tls=%v %s size=%d: answered %d: %s", k == 1, path, size, res.status, res.problem)
				}
			default:
				parsed++
				if first["parsed"] == "" {
					first["parsed"] = fmt.Sprintf("tls=%v %s size=%d: answered %d: %s", k == 1, path, size, res.status, res.problem)
				}
			}
		}
	}
	return
}

// TestS36PipelinedUploadAnsweredEarlyIsParsedAsRequests: the handler
// streaming an upload (no spool), an origin answering it before reading
// it, the client's next request pipelined behind the body. The rest of
// the body must never be parsed as requests.
func TestS36PipelinedUploadAnsweredEarlyIsParsedAsRequests(t *testing.T) {
	f := newS36Front(t, func(c *Config) { c.SpoolBytes = 0; c.SpoolDir = "" })
	runs, parsed, _, first := s36Classify(t, []string{f.plain, f.tls}, 1500*time.Millisecond)
	t.Logf("%d runs: %d follow-ups answered from a parse of the body; %d requests written in bodies reached the origin", runs, parsed, f.origin.smuggled.Load())
	if parsed > 0 || f.origin.smuggled.Load() > 0 {
		t.Errorf("%d of %d connections parsed the rest of an upload as requests (%d reached the origin); first: %s", parsed, runs, f.origin.smuggled.Load(), first["parsed"])
	}
}

// TestS36PipelinedUploadAnsweredEarlyCancelsTheNextRequest: as above; the
// follow-up, on a connection the edge kept open, must not be cancelled as
// if its client had gone.
func TestS36PipelinedUploadAnsweredEarlyCancelsTheNextRequest(t *testing.T) {
	f := newS36Front(t, func(c *Config) { c.SpoolBytes = 0; c.SpoolDir = "" })
	runs, _, cancelled, first := s36Classify(t, []string{f.plain, f.tls}, 1500*time.Millisecond)
	t.Logf("%d runs: %d follow-ups cancelled", runs, cancelled)
	if cancelled > 0 {
		t.Errorf("%d of %d follow-ups on a kept connection were answered 502 client-gone; first: %s", cancelled, runs, first["cancelled"])
	}
}

// TestS36EarlyAnswerKeepsItsConnectionClose: after an origin's early
// answer to an upload still being sent, dropUnreadBody stops reading the
// body and sets Connection: close so that the connection ends after the
// answer. The answer written must still carry it.
func TestS36EarlyAnswerKeepsItsConnectionClose(t *testing.T) {
	o := newS36Origin(t)
	h := proxyFor(t, o.srv.URL, func(c *Config) { c.RequestBuffering = false })
	pr, pw := io.Pipe()
	defer pw.Close()
	go func() { _, _ = pw.Write(s36Body(10 << 10)) }() // then nothing: the rest never comes
	req := httptest.NewRequest("POST", "/403", pr)
	req.ContentLength = 1 << 20
	req.Host = "example.test"
	rec := httptest.NewRecorder()
	done := make(chan struct{})
	go func() { h.ServeHTTP(rec, req); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("no answer")
	}
	if rec.Code != http.StatusForbidden {
		t.Fatalf("answered %d, want the origin's 403", rec.Code)
	}
	if got := rec.Header().Get("Connection"); got != "close" {
		t.Errorf("the early answer to an unfinished upload has Connection %q, want close (dropUnreadBody's field was removed before the answer went out)", got)
	}
}

// TestS36UploadAnsweredEarlyVariants: the same early answers with the
// follow-up sent after the answer (an ordinary keep-alive client), and
// with chunked bodies pipelined.
func TestS36UploadAnsweredEarlyVariants(t *testing.T) {
	for _, v := range []struct {
		name              string
		pipeline, chunked bool
	}{{"keepalive", false, false}, {"chunked-pipelined", true, true}} {
		t.Run(v.name, func(t *testing.T) {
			t.Parallel()
			f := newS36Front(t, func(c *Config) { c.SpoolBytes = 0; c.SpoolDir = "" })
			runs, parsed, cancelled, first := s36ClassifyMode(t, []string{f.plain, f.tls}, 1500*time.Millisecond, v.pipeline, v.chunked)
			t.Logf("%d runs: %d parsed from a body, %d cancelled; %d from bodies reached the origin", runs, parsed, cancelled, f.origin.smuggled.Load())
			if parsed+cancelled > 0 || f.origin.smuggled.Load() > 0 {
				t.Errorf("%d of %d follow-ups answered from a parse of the body, %d cancelled; first: %v", parsed, runs, cancelled, first)
			}
		})
	}
}
