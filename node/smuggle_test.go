package node

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// rawOrigin is a keep-alive HTTP/1.1 origin on a raw listener: it records
// every byte it receives per connection, frames requests with
// http.ReadRequest, and answers each with a cacheable page naming the
// request line it read.
type rawOrigin struct {
	ln  net.Listener
	mu  sync.Mutex
	raw []*bytes.Buffer
	req []string // request lines, in order
}

func newRawOrigin(t *testing.T) *rawOrigin {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	o := &rawOrigin{ln: ln}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go o.serve(c)
		}
	}()
	return o
}

type teeConn struct {
	net.Conn
	o   *rawOrigin
	buf *bytes.Buffer
}

func (c teeConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.o.mu.Lock()
	c.buf.Write(p[:n])
	c.o.mu.Unlock()
	return n, err
}

func (o *rawOrigin) serve(c net.Conn) {
	defer c.Close()
	buf := &bytes.Buffer{}
	o.mu.Lock()
	o.raw = append(o.raw, buf)
	o.mu.Unlock()
	br := bufio.NewReader(teeConn{c, o, buf})
	for {
		if _, err := br.Peek(1); err != nil {
			return
		}
		o.mu.Lock()
		start := buf.Len() - br.Buffered()
		o.mu.Unlock()
		req, err := http.ReadRequest(br)
		o.mu.Lock()
		all := buf.Bytes()[start:]
		first, _, _ := bytes.Cut(all, []byte("\r\n"))
		o.req = append(o.req, string(first))
		o.mu.Unlock()
		if err != nil {
			fmt.Fprintf(c, "HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
			return
		}
		body, _ := io.ReadAll(req.Body)
		page := fmt.Sprintf("origin read %s %s body=%q", req.Method, req.RequestURI, body)
		fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nCache-Control: max-age=600\r\nContent-Length: %d\r\n\r\n%s", len(page), page)
	}
}

func (o *rawOrigin) lines() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]string(nil), o.req...)
}

// TestH2PathWithSpaceIsRefused (a review's): an HTTP/2 :path with a space
// in its query ("/q?x HTTP/1.0") was accepted by both HTTP/2 servers
// (url.ParseRequestURI takes it) and forwarded verbatim, so the origin's
// HTTP/1.1 request line was "GET /q?x HTTP/1.0 HTTP/1.1": four words, a
// request-target the HTTP/1.1 front could never have produced (net/http
// cuts the line at its first space). RFC 9113 §8.3.1 / RFC 9112 §3.2: the
// edge now refuses such a :path with 400.
func TestH2PathWithSpaceIsRefused(t *testing.T) {
	o := newRawOrigin(t)
	originURL := "http://" + o.ln.Addr().String()
	for _, server := range []string{"edge", "go"} {
		t.Run(server, func(t *testing.T) {
			n := startNodeYAML(t, rvNodeYAML(t, originURL, originURL, server))
			c := rvH2Dial(t, n.tls.ln.Addr().String())
			got := c.ask(1, ":method", "GET", ":scheme", "https", ":authority", "a.test", ":path", "/q-"+server+"?x HTTP/1.0")
			t.Logf("answer: %s", got)
			if !strings.HasPrefix(got, "400 ") {
				t.Errorf("%s: answered %.40q, want 400", server, got)
			}
			for _, l := range o.lines() {
				if strings.Contains(l, "/q-"+server) {
					t.Errorf("%s: the request reached the origin: %q", server, l)
				}
			}
		})
	}
}

// TestPipelinedMixStaysInOrder (a review's): hits, handed misses, a HEAD and a
// POST with a chunked body (trailers), pipelined in one write on one
// connection; each answer must be its request's, in order.
func TestPipelinedMixStaysInOrder(t *testing.T) {
	o := newRawOrigin(t)
	n := startNode(t, "http://"+o.ln.Addr().String(), hitPathYAML(true))
	addr := n.PublicAddr()
	reviewGet(t, addr, "/h")
	reviewGet(t, addr, "/h")
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	reqs := []struct{ method, raw, want string }{
		{"GET", "GET /h HTTP/1.1\r\nHost: x\r\n\r\n", "origin read GET /h body=\"\""},
		{"GET", "GET /m1 HTTP/1.1\r\nHost: x\r\n\r\n", "origin read GET /m1 body=\"\""},
		{"HEAD", "HEAD /h HTTP/1.1\r\nHost: x\r\n\r\n", ""},
		{"GET", "GET /h HTTP/1.1\r\nHost: x\r\nIf-None-Match: \"zz\"\r\n\r\n", "origin read GET /h body=\"\""},
		{"GET", "GET /m2 HTTP/1.1\r\nHost: x\r\nRange: bytes=0-3\r\n\r\n", "orig"},
		{"POST", "POST /p HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\nX-T: 1\r\n\r\n", "origin read POST /p body=\"hello\""},
		{"GET", "GET /h HTTP/1.1\r\nHost: x\r\n\r\n", "origin read GET /h body=\"\""},
		{"GET", "GET /m3 HTTP/1.1\r\nHost: x\r\n\r\n", "origin read GET /m3 body=\"\""},
	}
	var all string
	for _, r := range reqs {
		all += r.raw
	}
	_, _ = c.Write([]byte(all))
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	br := bufio.NewReader(c)
	for i, r := range reqs {
		resp, err := http.ReadResponse(br, &http.Request{Method: r.method})
		if err != nil {
			t.Fatalf("answer %d: %v", i, err)
		}
		b, _ := io.ReadAll(resp.Body)
		if string(b) != r.want {
			t.Errorf("answer %d (%q): %d %q, want %q", i, strings.SplitN(r.raw, "\r\n", 2)[0], resp.StatusCode, b, r.want)
		}
	}
	t.Logf("origin lines: %q", o.lines())
}
