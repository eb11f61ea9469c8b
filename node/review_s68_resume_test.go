package node

// Session resumption across names with different certificates (s68): a
// session established with SNI a.test (a.test's certificate), offered back
// with SNI b.test, a site whose certificate is another.

import (
	"bufio"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"
)

// s68OneSession is a client session cache of one slot that hands its
// session to any name: a client that offers a.test's ticket for b.test
// (Go's own client keys sessions by name; this one stands for one that
// does not, or for an attacker).
type s68OneSession struct {
	mu sync.Mutex
	cs *tls.ClientSessionState
}

func (c *s68OneSession) Get(string) (*tls.ClientSessionState, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cs, c.cs != nil
}

func (c *s68OneSession) Put(_ string, cs *tls.ClientSessionState) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if cs != nil {
		c.cs = cs
	}
}

// s68Resume dials with SNI sni and the cache, asks GET /r for host, and
// returns whether the handshake resumed, the certificate names the client
// holds for the connection, and the answer.
func s68Resume(t *testing.T, addr, sni, host string, version uint16, cache tls.ClientSessionCache) (resumed bool, names []string, status int, body string) {
	t.Helper()
	d := &net.Dialer{Timeout: 5 * time.Second}
	c, err := tls.DialWithDialer(d, "tcp", addr, &tls.Config{InsecureSkipVerify: true, ServerName: sni, //nolint:gosec // test certificates
		NextProtos: []string{"http/1.1"}, MinVersion: version, MaxVersion: version, ClientSessionCache: cache})
	if err != nil {
		t.Fatalf("dial %q: %v", sni, err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	_, _ = io.WriteString(c, "GET /r HTTP/1.1\r\nHost: "+host+"\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: "GET"})
	if err != nil {
		t.Fatalf("SNI %q Host %q: %v", sni, host, err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	st := c.ConnectionState()
	return st.DidResume, st.PeerCertificates[0].DNSNames, resp.StatusCode, string(b)
}

// TestS68TicketForAnotherNameIsNotResumed: over TLS 1.2, RFC 6066 §3: "A
// server that implements this extension MUST NOT accept the request to
// resume the session if the server_name extension contains a different
// name. Instead, it proceeds with a full handshake". The node resumes
// a.test's session under SNI b.test: the connection for b.test is
// authenticated by a.test's certificate only. TLS 1.3 (RFC 8446 §4.6.1
// puts the check on the client) is logged, not asserted.
func TestS68TicketForAnotherNameIsNotResumed(t *testing.T) {
	n := s68Node(t, s68Modes[1].tuning)
	addr := n.tls.ln.Addr().String()
	for _, v := range []struct {
		name    string
		version uint16
	}{{"TLS 1.2", tls.VersionTLS12}, {"TLS 1.3", tls.VersionTLS13}} {
		t.Run(v.name, func(t *testing.T) {
			cache := &s68OneSession{}
			if resumed, names, st, _ := s68Resume(t, addr, "a.test", "a.test", v.version, cache); resumed || st != 200 || len(names) != 1 || names[0] != "a.test" {
				t.Fatalf("first connection: resumed %v, certificate %v, status %d", resumed, names, st)
			}
			if cache.cs == nil {
				t.Fatal("no session ticket was issued")
			}
			resumed, names, st, body := s68Resume(t, addr, "b.test", "b.test", v.version, cache)
			t.Logf("%s: SNI b.test with a.test's session: resumed %v, certificate %v, %d %q", v.name, resumed, names, st, body)
			if resumed && v.version == tls.VersionTLS12 {
				t.Errorf("%s: a.test's session was resumed with SNI b.test (certificate %v), and b.test answered %d %q; want a full handshake with b.test's certificate (RFC 6066 §3)", v.name, names, st, body)
			}
		})
	}
}
