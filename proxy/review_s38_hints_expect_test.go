package proxy

import (
	"bufio"
	"io"
	"net"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/edgecache/edge/origin"
)

// s38RawOrigin answers each request on its connections with script: it
// reads the request head, calls script with the connection and the head.
func s38RawOrigin(t *testing.T, script func(c net.Conn, br *bufio.Reader, head string)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				br := bufio.NewReader(c)
				for {
					var head strings.Builder
					for {
						line, err := br.ReadString('\n')
						if err != nil {
							return
						}
						head.WriteString(line)
						if line == "\r\n" {
							break
						}
					}
					script(c, br, head.String())
				}
			}()
		}
	}()
	return "http://" + ln.Addr().String()
}

func s38ProxyTo(t *testing.T, originURL string, mod func(*Config)) (*Handler, *httptest.Server) {
	t.Helper()
	oc, err := origin.NewClient(origin.ClientConfig{URL: originURL, ConnectTimeout: 5 * time.Second, ResponseTimeout: 10 * time.Second, MaxIdleConns: 4, IdleConnTimeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	if mod != nil {
		mod(&cfg)
	}
	store := NewStore(16<<20, 8)
	h := New(cfg, store, FetcherFunc(oc.Fetch), NewMetrics(prometheus.NewRegistry(), store), nil)
	front := httptest.NewServer(h)
	t.Cleanup(front.Close)
	return h, front
}

// TestS38HintDuringAnUploadsContinueRacesTheConnection: an HTTP/1.1
// upload with Expect: 100-continue streamed to the origin
// (limits.request_buffering off). The origin sends its 100 Continue and a
// 103 together: the transport's write goroutine reads the client's body,
// on which net/http's server writes "100 Continue" to the client's
// connection (under its writeContinueMu), while the transport's read
// goroutine relays the 103 with WriteHeader(103), which net/http writes to
// the same buffered writer without that lock (net/http's ResponseWriter
// is not for concurrent use). -race reports the two writers; without it
// the bytes of the 100 and the 103 can interleave on the wire. A handler
// that relays 1xx while its body streams must serialise them (relay from
// the request's goroutine, or not while the body is being read).
func TestS38HintDuringAnUploadsContinueRacesTheConnection(t *testing.T) {
	originURL := s38RawOrigin(t, func(c net.Conn, br *bufio.Reader, head string) {
		n := 0
		for _, l := range strings.Split(head, "\r\n") {
			if k, v, ok := strings.Cut(l, ":"); ok && strings.EqualFold(k, "Content-Length") {
				n, _ = strconv.Atoi(strings.TrimSpace(v))
			}
		}
		_, _ = io.WriteString(c, "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </up.css>; rel=preload; as=style\r\n\r\n")
		if _, err := io.ReadFull(br, make([]byte, n)); err != nil {
			return
		}
		_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nCache-Control: no-store\r\nContent-Length: 2\r\n\r\nok")
	})
	_, front := s38ProxyTo(t, originURL, func(c *Config) { c.RequestBuffering = false })

	for i := range 30 {
		c, err := net.Dial("tcp", front.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		body := strings.Repeat("u", 4096)
		if _, err := io.WriteString(c, "POST /up"+strconv.Itoa(i)+" HTTP/1.1\r\nHost: example.com\r\nContent-Length: "+strconv.Itoa(len(body))+"\r\nExpect: 100-continue\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		br := bufio.NewReader(c)
		var lines []string
		sent := false
		for {
			line, err := br.ReadString('\n')
			if err != nil {
				t.Fatalf("upload %d (Expect: 100-continue, streamed): the answer broke off (%v); the client read %q: the relayed 103 (transport read goroutine) and net/http's 100 Continue (body read on the transport write goroutine) were written to the connection at once", i, err, lines)
			}
			lines = append(lines, line)
			if strings.HasPrefix(line, "HTTP/1.1 100 ") && !sent {
				sent = true
				if _, err := io.WriteString(c, body); err != nil {
					t.Fatal(err)
				}
			}
			if strings.HasPrefix(line, "HTTP/1.1 200 ") {
				break
			}
			if strings.HasPrefix(line, "HTTP/") && !strings.HasPrefix(line, "HTTP/1.1 100 ") && !strings.HasPrefix(line, "HTTP/1.1 103 ") {
				t.Fatalf("upload %d: a status line %q among %q: the 100 Continue and the relayed 103 were written at once", i, line, lines)
			}
		}
		c.Close()
	}
}
