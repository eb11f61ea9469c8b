package node

import (
	"bufio"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// s70Raw sends raw requests, pipelined, on one TLS connection with SNI sni
// and returns each answer's status and body.
func s70Raw(t *testing.T, n *Node, sni string, reqs ...string) (status []int, bodies []string) {
	t.Helper()
	c, err := s11tlsDial(n.tls.ln.Addr().String(), sni)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	_, _ = io.WriteString(c, strings.Join(reqs, ""))
	br := bufio.NewReader(c)
	for range reqs {
		resp, err := http.ReadResponse(br, &http.Request{Method: "GET"})
		if err != nil {
			t.Fatalf("SNI %q: %v (after %v)", sni, err, status)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		status, bodies = append(status, resp.StatusCode), append(bodies, string(b))
	}
	return status, bodies
}

// TestS70HostFormsOnATLSConnection: spellings of the handshake's host
// (a port, a trailing dot) are served; a pipelined request for another
// host after a hit on the same connection, and an absolute-form target
// naming another host, are 421 on both fronts.
func TestS70HostFormsOnATLSConnection(t *testing.T) {
	for _, m := range s68Modes {
		t.Run(m.name, func(t *testing.T) {
			n := s68Node(t, m.tuning)
			for range 2 {
				s68Ask(t, n, 1, "b.test", "b.test", "/p")
				s68Ask(t, n, 1, "a.test", "a.test", "/p")
				n.Proxy().Wait()
			}
			for _, host := range []string{"a.test:443", "a.test.", "A.TEST", "a.test:" + n.tls.port} {
				st, b := s70Raw(t, n, "a.test", "GET /p HTTP/1.1\r\nHost: "+host+"\r\n\r\n")
				if st[0] != 200 || b[0] != "site=a path=/p" {
					t.Errorf("SNI a.test Host %q: %d %q", host, st[0], b[0])
				}
			}
			st, b := s70Raw(t, n, "a.test",
				"GET /p HTTP/1.1\r\nHost: a.test\r\n\r\n",
				"GET /p HTTP/1.1\r\nHost: b.test\r\n\r\n",
				"GET /p HTTP/1.1\r\nHost: a.test\r\n\r\n")
			if st[0] != 200 || st[1] != http.StatusMisdirectedRequest || strings.Contains(b[1], "site=b") || st[2] != 200 {
				t.Errorf("pipelined a, b, a on SNI a.test: %v %q; want 200 421 200", st, b)
			}
			for _, req := range []string{
				"GET https://b.test/p HTTP/1.1\r\nHost: a.test\r\n\r\n",
				"GET http://b.test/p HTTP/1.1\r\nHost: a.test\r\n\r\n",
				"GET https://b.test:443/p HTTP/1.1\r\nHost: a.test\r\n\r\n",
			} {
				st, b := s70Raw(t, n, "a.test", req)
				if st[0] != http.StatusMisdirectedRequest || strings.Contains(b[0], "site=b") {
					t.Errorf("SNI a.test, %q: %d %q; want 421", strings.SplitN(req, "\r\n", 2)[0], st[0], b[0])
				}
			}
			st, b = s70Raw(t, n, "a.test", "GET https://a.test/p HTTP/1.1\r\nHost: b.test\r\n\r\n")
			t.Logf("SNI a.test, absolute a.test, Host b.test: %d %q", st[0], b[0])
			if strings.Contains(b[0], "site=b") {
				t.Errorf("SNI a.test, absolute-form a.test with Host b.test served b's page")
			}
		})
	}
}
