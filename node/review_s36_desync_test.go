package node

// A review found (now mended): after an origin answered a streamed upload
// early, stream removed the Connection: close dropUnreadBody had set, so the
// connection was kept while the body's read deadline stood in the past:
// net/http parsed the rest of the body as requests (some reached the
// origin) or cancelled the next request (502 client-gone). closingWriter
// (proxy/limits.go) now sets the field as the header is written.
//
// A hostile review (s36) of request-body framing through a real node
// (public listener, plain and TLS, hit path on and off): whatever the edge
// answers to a request with a body, the rest of that body must never be
// read as a request, and a later request on the connection must get
// exactly its own answer.

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func s36FirstLine(b []byte) []byte {
	if i := bytes.IndexByte(b, '\n'); i >= 0 {
		return b[:i]
	}
	return b
}

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
		case strings.HasPrefix(p, "/echo"):
			b, _ := io.ReadAll(r.Body)
			_, _ = fmt.Fprintf(w, "echo:%s:%d", b[:min(len(b), 24)], len(b))
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
	host      string                                        // the follow-up's Host (example.test)
	check     func(resp *http.Response, body []byte) string // judges the follow-up's answer ("" when right)
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
	host := p.host
	if host == "" {
		host = "example.test"
	}
	follow := "GET " + after + " HTTP/1.1\r\nHost: " + host + "\r\n\r\n"
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
			res.problem = fmt.Sprintf("after a Connection: close answer, more came: %q", s36FirstLine(rest))
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
	if p.check != nil {
		if why := p.check(next, got); why != "" {
			res.problem = "the follow-up's answer: " + why
		}
		return res
	}
	want := "after:GET:" + after
	if next.StatusCode != http.StatusOK || string(got) != want {
		res.problem = fmt.Sprintf("the follow-up got %d %q (fields %v), want %q", next.StatusCode, got, next.Header, want)
	}
	return res
}

func startS36Node(t *testing.T, origin, limits string, hitPath bool) (plain, tlsAddr string, n *Node) {
	t.Helper()
	cp, kp := writePair(t, t.TempDir(), "a", []string{"example.test", "smuggle.test"}, 1)
	yaml := "origin: {url: '" + origin + "'}\nlisten: '" + freeAddr(t) + "'\nadmin: {listen: '" + freeAddr(t) + "', token: tok}\n" +
		"tls: {listen: '" + freeAddr(t) + "', cert_file: '" + cp + "', key_file: '" + kp + "'}\n" +
		"tuning: {hit_path: " + strconv.FormatBool(hitPath) + "}\n" + limits
	n = startNodeYAML(t, yaml)
	return n.pubLn.Addr().String(), n.tls.ln.Addr().String(), n
}

// TestS36NodeEarlyAnswerToUpload: a node streaming uploads past 64 KiB
// (limits.spool_bytes 0), an origin answering 302/403 before it reads a
// body of 256 KiB or 300 000 bytes, the follow-up pipelined behind it,
// plain and TLS. On a connection the node keeps, the follow-up must get its
// own answer: not one parsed from the body, not a 502 client-gone.
func TestS36NodeEarlyAnswerToUpload(t *testing.T) {
	o := newS36Origin(t)
	budget := 1500 * time.Millisecond
	if v := os.Getenv("S36_BUDGET"); v != "" {
		budget, _ = time.ParseDuration(v)
	}
	plain, tlsAddr, _ := startS36Node(t, o.srv.URL, "limits: {spool_bytes: 0}\n", false)
	fails, total := 0, 0
	byKind := map[string]int{}
	end := time.Now().Add(budget)
	for i := 0; time.Now().Before(end); i++ {
		for _, useTLS := range []bool{false, true} {
			path := []string{"/302", "/403"}[(i/2)%2]
			size := 300000
			if i%2 == 0 {
				size = 256 << 10
			}
			addr := plain
			if useTLS {
				addr = tlsAddr
			}
			head := fmt.Sprintf("POST %s/%d HTTP/1.1\r\nHost: example.test\r\nContent-Length: %d\r\n\r\n", path, i, size)
			res := s36Probe{addr: addr, tls: useTLS, head: head, body: s36Body(size), pipeline: os.Getenv("S36_KEEPALIVE") == ""}.run(t)
			total++
			if res.problem != "" {
				fails++
				if strings.Contains(res.problem, "client-gone") {
					byKind["502 client-gone"]++
				} else {
					byKind["other"]++
				}
				if fails <= 2 {
					t.Errorf("tls=%v %s size=%d: answered %d close=%v: %.300s", useTLS, path, size, res.status, res.closed, res.problem)
				}
			}
		}
	}
	t.Logf("%d of %d follow-ups answered wrongly: %v", fails, total, byKind)
	if n := o.smuggled.Load(); n > 0 {
		t.Errorf("%d requests written inside bodies reached the origin", n)
	}
}

// TestS36NodeExpectContinue: Expect: 100-continue uploads through a node
// (whose origin client waits a second for a 100), to origins that read and
// that answer first, the body sent after a pause or after the interim
// answer, the follow-up after it.
func TestS36NodeExpectContinue(t *testing.T) {
	o := newS36Origin(t)
	var wg sync.WaitGroup
	var mu sync.Mutex
	for _, lim := range []string{"", "limits: {request_buffering: false}\n"} {
		plain, tlsAddr, _ := startS36Node(t, o.srv.URL, lim, true)
		for _, useTLS := range []bool{false, true} {
			addr := plain
			if useTLS {
				addr = tlsAddr
			}
			for _, path := range []string{"/read", "/403", "/302"} {
				for _, size := range []int{10, 100 << 10, 300 << 10} {
					heads, bodies := s36Framings("POST", path, "example.test", size, "Expect: 100-continue\r\n")
					for i := range heads {
						for _, pipe := range []bool{false, true} {
							wg.Add(1)
							go func() {
								defer wg.Done()
								res := s36Probe{addr: addr, tls: useTLS, head: heads[i], body: bodies[i], pipeline: pipe, pause: 300 * time.Millisecond}.run(t)
								if res.problem != "" {
									mu.Lock()
									t.Errorf("%q tls=%v %s size=%d chunked=%v pipelined=%v: answered %d (1xx %v): %s", lim, useTLS, path, size, i == 1, pipe, res.status, res.info, res.problem)
									mu.Unlock()
								}
							}()
						}
					}
				}
			}
		}
	}
	wg.Wait()
	if n := o.smuggled.Load(); n > 0 {
		t.Errorf("%d requests written inside bodies reached the origin", n)
	}
}

func s36Framings(method, path, host string, size int, extra string) (heads []string, bodies [][]byte) {
	for _, chunked := range []bool{false, true} {
		head := fmt.Sprintf("%s %s HTTP/1.1\r\nHost: %s\r\n%s", method, path, host, extra)
		body := s36Body(size)
		if chunked {
			head += "Transfer-Encoding: chunked\r\n\r\n"
			body = s36Chunked(body, 8<<10, "")
		} else {
			head += fmt.Sprintf("Content-Length: %d\r\n\r\n", size)
		}
		heads, bodies = append(heads, head), append(bodies, body)
	}
	return heads, bodies
}

// TestS36NodeOwnAnswersToBodies: the node's own answers to requests with
// bodies (no site for the host, a site's rate limit, max_body_bytes, a
// GET or HEAD with a body on the hit path, OPTIONS/DELETE/TRACE) through
// its public listeners, plain and TLS.
func TestS36NodeOwnAnswersToBodies(t *testing.T) {
	o := newS36Origin(t)
	cp, kp := writePair(t, t.TempDir(), "a", []string{"example.test", "limited.test"}, 1)
	yaml := "listen: '" + freeAddr(t) + "'\nadmin: {listen: '" + freeAddr(t) + "', token: tok}\n" +
		"tls: {listen: '" + freeAddr(t) + "', cert_file: '" + cp + "', key_file: '" + kp + "'}\n" +
		"tuning: {hit_path: true}\nlimits: {max_body_bytes: 100KiB}\n" +
		"sites:\n  - name: a\n    hosts: [example.test]\n    origins: ['" + o.srv.URL + "']\n" +
		"  - name: l\n    hosts: [limited.test]\n    origins: ['" + o.srv.URL + "']\n    rate_limit: {rate: 0.001, burst: 1}\n"
	n := startNodeYAML(t, yaml)
	plain, tlsAddr := n.pubLn.Addr().String(), n.tls.ln.Addr().String()
	// A cached page for GETs with bodies that would hit, and the rate
	// limit's one token spent.
	for _, hp := range [][2]string{{"example.test", "/cached/a"}, {"limited.test", "/cached/l"}} {
		res := s36Probe{addr: plain, head: "GET " + hp[1] + " HTTP/1.1\r\nHost: " + hp[0] + "\r\n\r\n", afterPath: "/after"}.run(t)
		if res.status != 200 {
			t.Fatalf("fill %v: %d %s", hp, res.status, res.problem)
		}
	}
	n.Proxy().Wait()
	cases := []struct{ method, path, host string }{
		{"POST", "/read", "nosuch.test"}, {"POST", "/read", "limited.test"}, {"POST", "/403", "limited.test"},
		{"GET", "/cached/a", "example.test"}, {"HEAD", "/cached/a", "example.test"}, {"GET", "/cached/l", "limited.test"},
		{"OPTIONS", "/read", "example.test"}, {"DELETE", "/403", "example.test"}, {"TRACE", "/read", "example.test"},
		{"POST", "/read", "example.test"}, {"PUT", "/302", "example.test"},
	}
	statuses := map[string]int{}
	for _, useTLS := range []bool{false, true} {
		addr := plain
		if useTLS {
			addr = tlsAddr
		}
		for _, c := range cases {
			for _, size := range []int{10, 150 << 10, 300 << 10} {
				heads, bodies := s36Framings(c.method, c.path, c.host, size, "")
				for i := range heads {
					for _, pipe := range []bool{false, true} {
						res := s36Probe{addr: addr, tls: useTLS, head: heads[i], body: bodies[i], pipeline: pipe}.run(t)
						statuses[fmt.Sprintf("%s %s %s", c.method, c.host, c.path)] = res.status
						if res.problem != "" {
							t.Errorf("tls=%v %s %s %s size=%d chunked=%v pipelined=%v: answered %d: %s", useTLS, c.method, c.host, c.path, size, i == 1, pipe, res.status, res.problem)
						}
					}
				}
			}
		}
	}
	t.Logf("statuses: %v", statuses)
	if n := o.smuggled.Load(); n > 0 {
		t.Errorf("%d requests written inside bodies reached the origin", n)
	}
}

// TestS36NodeRedirectAndAdminBodies: the plain listener's redirect to
// HTTPS (which keeps the connection open) and the admin listener's purge,
// each given a body of requests.
func TestS36NodeRedirectAndAdminBodies(t *testing.T) {
	o := newS36Origin(t)
	cp, kp := writePair(t, t.TempDir(), "a", []string{"example.test"}, 1)
	yaml := "origin: {url: '" + o.srv.URL + "'}\nlisten: '" + freeAddr(t) + "'\nadmin: {listen: '" + freeAddr(t) + "', token: tok}\n" +
		"tls: {listen: '" + freeAddr(t) + "', cert_file: '" + cp + "', key_file: '" + kp + "'}\nhttp: {redirect_to_https: true}\n" +
		"tuning: {hit_path: true}\n"
	n := startNodeYAML(t, yaml)
	plain, adm := n.pubLn.Addr().String(), n.AdminAddr()
	redirected := func(resp *http.Response, body []byte) string {
		if resp.StatusCode != http.StatusPermanentRedirect || !strings.HasSuffix(resp.Header.Get("Location"), "/after") {
			return fmt.Sprintf("%d Location %q, want the follow-up's own 308 to /after", resp.StatusCode, resp.Header.Get("Location"))
		}
		return ""
	}
	healthy := func(resp *http.Response, body []byte) string {
		if resp.StatusCode != http.StatusOK || string(body) != "ok\n" {
			return fmt.Sprintf("%d %q, want /healthz's ok", resp.StatusCode, body)
		}
		return ""
	}
	for _, size := range []int{10, 100 << 10, 256 << 10, 300 << 10, 1 << 20} {
		for _, pipe := range []bool{false, true} {
			heads, bodies := s36Framings("POST", "/upload", "example.test", size, "")
			for i := range heads {
				res := s36Probe{addr: plain, head: heads[i], body: bodies[i], pipeline: pipe, check: redirected}.run(t)
				if res.problem != "" {
					t.Errorf("redirect size=%d chunked=%v pipelined=%v: answered %d: %s", size, i == 1, pipe, res.status, res.problem)
				}
			}
			for _, auth := range []string{"", "Authorization: Bearer tok\r\n", "Authorization: Bearer wrong\r\n"} {
				heads, bodies = s36Framings("POST", "/purge?url=http://example.test/x", "example.test", size, auth)
				for i := range heads {
					res := s36Probe{addr: adm, head: heads[i], body: bodies[i], pipeline: pipe, afterPath: "/healthz", check: healthy}.run(t)
					if res.problem != "" {
						t.Errorf("purge auth=%q size=%d chunked=%v pipelined=%v: answered %d: %s", strings.TrimSpace(auth), size, i == 1, pipe, res.status, res.problem)
					}
				}
			}
		}
	}
	if n := o.smuggled.Load(); n > 0 {
		t.Errorf("%d requests written inside bodies reached the origin", n)
	}
}

// TestS36NodeConcurrentUploadsAndAbortsStayApart: many connections upload
// bodies that name themselves, keep-alive and pipelined, while others cut
// their uploads short and leave; every answer must be its own request's.
func TestS36NodeConcurrentUploadsAndAbortsStayApart(t *testing.T) {
	o := newS36Origin(t)
	for _, lim := range []string{"limits: {spool_bytes: 0}\n", "limits: {request_buffering: false}\n"} {
		plain, tlsAddr, _ := startS36Node(t, o.srv.URL, lim, true)
		var wg sync.WaitGroup
		var bad atomic.Int64
		for c := range 24 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				useTLS := c%2 == 1
				addr := plain
				if useTLS {
					addr = tlsAddr
				}
				if c%4 == 2 {
					// An aborting client: half an upload, then gone.
					for r := range 10 {
						conn := s36Dial(t, addr, useTLS)
						fmt.Fprintf(conn, "POST /echo/abort HTTP/1.1\r\nHost: example.test\r\nContent-Length: 300000\r\n\r\n%s", s36Body(100000+r*1000))
						conn.Close()
					}
					return
				}
				conn := s36Dial(t, addr, useTLS)
				defer conn.Close()
				_ = conn.SetDeadline(time.Now().Add(20 * time.Second))
				br := bufio.NewReader(conn)
				for r := range 8 {
					sizes := []int{1000, 70000, 200000}
					id := fmt.Sprintf("id-%03d-%03d:", c, r)
					body := append([]byte(id), s36Body(sizes[r%3])...)
					msg := fmt.Sprintf("POST /echo/%d/%d HTTP/1.1\r\nHost: example.test\r\nContent-Length: %d\r\n\r\n%s", c, r, len(body), body)
					go func() { _, _ = io.WriteString(conn, msg) }()
					resp, err := http.ReadResponse(br, nil)
					if err != nil {
						bad.Add(1)
						t.Errorf("conn %d round %d: %v", c, r, err)
						return
					}
					got, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					want := fmt.Sprintf("echo:%s:%d", body[:24], len(body))
					if string(got) != want {
						bad.Add(1)
						t.Errorf("conn %d round %d: got %d %.80q, want %q", c, r, resp.StatusCode, got, want)
						return
					}
					if resp.Close {
						return
					}
				}
			}()
		}
		wg.Wait()
		if bad.Load() > 0 {
			t.Errorf("%s: %d answers were not their own request's", strings.TrimSpace(lim), bad.Load())
		}
	}
	if n := o.smuggled.Load(); n > 0 {
		t.Errorf("%d requests written inside bodies reached the origin", n)
	}
}
