package node

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// s11WaitOpen waits until n.conns.Open() is want, or fails.
func s11WaitOpen(t *testing.T, n *Node, want int, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for n.conns.Open() != want && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if got := n.conns.Open(); got != want {
		n.conns.mu.Lock()
		m := fmt.Sprint(n.conns.byAddr)
		n.conns.mu.Unlock()
		t.Fatalf("n.conns.Open() = %d, want %d (by address %s)", got, want, m)
	}
}

func s11TLSClient(addr string, h2 bool) *http.Client {
	tc := &tls.Config{InsecureSkipVerify: true, ServerName: "a.test"} //nolint:gosec // test certificate
	tr := &http.Transport{TLSClientConfig: tc, ForceAttemptHTTP2: h2, DisableCompression: true,
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "tcp", addr)
		}}
	if !h2 {
		tr.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
	}
	return &http.Client{Timeout: 5 * time.Second, Transport: tr}
}

// s11Send dials addr (plain TCP, or TLS with the given ALPN protocol),
// writes raw, half-closes the connection if asked, and reads until the
// node closes it or the wait ends.
func s11Send(addr, alpn, raw string, halfClose bool, wait time.Duration) {
	var c net.Conn
	var err error
	if alpn == "" {
		c, err = net.Dial("tcp", addr)
	} else {
		c, err = tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true, ServerName: "a.test", NextProtos: []string{alpn}}) //nolint:gosec // test
	}
	if err != nil {
		return
	}
	defer c.Close()
	_, _ = io.WriteString(c, raw)
	if halfClose {
		_ = c.(*net.TCPConn).CloseWrite()
	}
	_ = c.SetReadDeadline(time.Now().Add(wait))
	_, _ = io.Copy(io.Discard, c)
}

// s11Churn opens and ends connections in every way it knows, concurrently.
func s11Churn(t *testing.T, n *Node, h3 bool) {
	t.Helper()
	plain, tlsAddr := n.PublicAddr(), h3Addr(n)
	var wg sync.WaitGroup
	do := func(f func()) { wg.Add(1); go func() { defer wg.Done(); f() }() }
	for i := range 6 {
		path := fmt.Sprintf("/a%d", i%2)
		// closed at once, nothing sent
		do(func() {
			if c, err := net.Dial("tcp", plain); err == nil {
				c.Close()
			}
			if c, err := net.Dial("tcp", tlsAddr); err == nil {
				c.Close()
			}
		})
		// plain keep-alive requests (miss, then hits), client closes
		do(func() {
			cl := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{}}
			for range 3 {
				if r, err := cl.Get("http://" + plain + path); err == nil {
					_, _ = io.Copy(io.Discard, r.Body)
					r.Body.Close()
				}
			}
			cl.CloseIdleConnections()
		})
		// plain keep-alive left idle: the idle timeout ends it
		do(func() {
			c, err := net.Dial("tcp", plain)
			if err != nil {
				return
			}
			defer c.Close()
			_, _ = io.WriteString(c, "GET "+path+" HTTP/1.1\r\nHost: x\r\n\r\n")
			br := bufio.NewReader(c)
			if r, err := http.ReadResponse(br, nil); err == nil {
				_, _ = io.Copy(io.Discard, r.Body)
			}
			_ = c.SetReadDeadline(time.Now().Add(3 * time.Second))
			_, _ = io.Copy(io.Discard, br) // until the node closes
		})
		// plain partial head: the read-header timeout ends it
		do(func() { s11Send(plain, "", "GET "+path+" HTTP/1.1\r\nHo", false, 3*time.Second) })
		// plain: a hit, then a partial head after it (in the loop)
		do(func() {
			s11Send(plain, "", "GET "+path+" HTTP/1.1\r\nHost: x\r\n\r\nGET "+path+" HTTP/1.1\r\nHo", false, 3*time.Second)
		})
		// plain pipelined, miss + hit, half close
		do(func() {
			s11Send(plain, "", "GET /slow HTTP/1.1\r\nHost: x\r\n\r\nGET "+path+" HTTP/1.1\r\nHost: x\r\n\r\nGET "+path+"?q HTTP/1.1\r\nHost: x\r\nIf-None-Match: \"x\"\r\n\r\n", true, 3*time.Second)
		})
		// plain garbage: 400
		do(func() { s11Send(plain, "", "\x00\x01garbage\r\n\r\n", false, 3*time.Second) })
		// plain: client resets mid-response of a big body
		do(func() {
			c, err := net.Dial("tcp", plain)
			if err != nil {
				return
			}
			_, _ = io.WriteString(c, "GET /big HTTP/1.1\r\nHost: x\r\n\r\n")
			b := make([]byte, 100)
			_ = c.SetReadDeadline(time.Now().Add(3 * time.Second))
			_, _ = c.Read(b)
			_ = c.(*net.TCPConn).SetLinger(0)
			c.Close()
		})
		// TLS HTTP/1.1 and h2
		for _, h2 := range []bool{false, true} {
			do(func() {
				cl := s11TLSClient(tlsAddr, h2)
				for range 3 {
					if r, err := cl.Get("https://a.test" + path); err == nil {
						_, _ = io.Copy(io.Discard, r.Body)
						r.Body.Close()
					}
				}
				cl.CloseIdleConnections()
			})
			// TLS kept idle: idle timeout
			do(func() {
				cl := s11TLSClient(tlsAddr, h2)
				if r, err := cl.Get("https://a.test" + path); err == nil {
					_, _ = io.Copy(io.Discard, r.Body)
					r.Body.Close()
				}
				time.Sleep(700 * time.Millisecond)
				cl.CloseIdleConnections()
			})
		}
		// TLS: garbage instead of a ClientHello
		do(func() { s11Send(tlsAddr, "", "GET / HTTP/1.1\r\nHost: x\r\n\r\n", false, 3*time.Second) })
		// TLS: silence: the handshake timeout ends it
		do(func() { s11Send(tlsAddr, "", "", false, 3*time.Second) })
		// TLS: client gives up mid-handshake
		do(func() {
			c, err := net.Dial("tcp", tlsAddr)
			if err != nil {
				return
			}
			tc := tls.Client(c, &tls.Config{InsecureSkipVerify: true, ServerName: "a.test", //nolint:gosec // test
				VerifyPeerCertificate: func([][]byte, [][]*x509.Certificate) error { return fmt.Errorf("no") }})
			_ = tc.Handshake()
			c.Close()
		})
		// TLS: handshake done, partial head, read-header timeout
		do(func() { s11Send(tlsAddr, "http/1.1", "GET "+path+" HTTP/1.1\r\nHo", false, 3*time.Second) })
		// TLS h2 preface only, then silence
		// (net/http's HTTP/2, http2_server: go, waits 10 s for a preface
		// whatever read_header_timeout says: give up first.)
		do(func() { s11Send(tlsAddr, "h2", "", false, time.Second) })
		if h3 {
			do(func() {
				cl := h3Client(n)
				cl.Timeout = 3 * time.Second
				if r, err := cl.Get("https://a.test" + path); err == nil {
					_, _ = io.Copy(io.Discard, r.Body)
					r.Body.Close()
				}
				cl.CloseIdleConnections()
				if c, ok := cl.Transport.(interface{ Close() error }); ok {
					_ = c.Close()
				}
			})
		}
	}
	wg.Wait()
}

// TestS11ConnChurnReturnsToZero: after connections end in every way, on
// every listener and with every front, no slot is left counted.
func TestS11ConnChurnReturnsToZero(t *testing.T) {
	origin := reviewOrigin(t)
	for _, mode := range []string{
		"tuning: {hit_path: true, write_batching: true, http2_server: edge}",
		"tuning: {hit_path: true, write_batching: false, http2_server: go}",
		"tuning: {hit_path: false, write_batching: true, http2_server: go}",
		"tuning: {hit_path: false, write_batching: false, http2_server: edge}",
	} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			cp, kp := writePair(t, t.TempDir(), "a", []string{"a.test"}, 1)
			n := startNode(t, origin.URL, mode+"\nlimits: {read_header_timeout: 300ms, idle_timeout: 400ms, max_connections_per_client: 1000}\n"+
				"tls: {listen: '127.0.0.1:0', cert_file: '"+cp+"', key_file: '"+kp+"', http3: true}\n")
			s11Churn(t, n, true)
			s11WaitOpen(t, n, 0, 3*time.Second)
			_, js := getBody(t, "http://"+n.AdminAddr()+"/status.json")
			if !strings.Contains(js, `"client_connections":{"open":0`) {
				t.Errorf("status.json: %s", js[strings.Index(js, "client_connections"):][:120])
			}
		})
	}
}
