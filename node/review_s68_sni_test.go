package node

// A hostile review of the TLS front (s68): the relation between the TLS
// connection's SNI and certificate and the requests carried on it.
//
// RFC 9110 §7.4: "Unless the connection is from a trusted gateway, an
// origin server MUST reject a request if any scheme-specific requirements
// for the target URI are not met. In particular, a request for an "https"
// resource MUST be rejected unless it has been received over a connection
// that has been secured via a certificate valid for that target URI's
// origin". The answer is 421 (§15.5.20); RFC 9113 §9.1.1 makes it the
// signal that lets HTTP/2 clients coalesce connections safely.
//
// The node below holds a certificate per site (a.test, b.test), plus one
// naming both hosts of a third site (x.w.test, y.w.test: coalescing a
// client may rightly do). A connection whose handshake was for a.test,
// and whose certificate names a.test only, carries requests for b.test.

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
)

// s68Node runs a node with sites a (a.test), b (b.test) and w (x.w.test,
// y.w.test), each with its own certificate and origin, HTTP/3 on, and the
// given tuning.
func s68Node(t *testing.T, tuning string) *Node {
	t.Helper()
	originFor := func(site string) *httptest.Server {
		o := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Cache-Control", "max-age=600")
			w.Header().Set("Content-Type", "text/plain")
			fmt.Fprintf(w, "site=%s path=%s", site, r.URL.RequestURI())
		}))
		t.Cleanup(o.Close)
		return o
	}
	oa, ob, ow := originFor("a"), originFor("b"), originFor("w")
	dir := t.TempDir()
	ca, ka := writePair(t, dir, "a", []string{"a.test"}, 1)
	cb, kb := writePair(t, dir, "b", []string{"b.test"}, 2)
	cw, kw := writePair(t, dir, "w", []string{"x.w.test", "y.w.test"}, 3)
	return startNodeYAML(t, "listen: '"+freeAddr(t)+"'\nadmin: {listen: '"+freeAddr(t)+"'}\nnode_id: n1\n"+
		"tls:\n  listen: '127.0.0.1:0'\n  cert_file: '"+ca+"'\n  key_file: '"+ka+"'\n  http3: true\n"+
		"  certificates:\n    - {cert_file: '"+cb+"', key_file: '"+kb+"'}\n    - {cert_file: '"+cw+"', key_file: '"+kw+"'}\n"+
		tuning+
		"sites:\n  - name: a\n    hosts: [a.test]\n    origins: ['"+oa.URL+"']\n"+
		"  - name: b\n    hosts: [b.test]\n    origins: ['"+ob.URL+"']\n"+
		"  - name: w\n    hosts: [x.w.test, y.w.test]\n    origins: ['"+ow.URL+"']\n")
}

// s68Answer is one response: the protocol it came over, its status and
// body, the names the connection's certificate holds, and its fields.
type s68Answer struct {
	proto  int
	status int
	body   string
	names  []string
	header http.Header
}

func (a s68Answer) String() string {
	return fmt.Sprintf("HTTP/%d %d %q (certificate %v)", a.proto, a.status, a.body, a.names)
}

// s68Ask sends GET path for host on a new connection with SNI sni over
// proto (1: HTTP/1.1 over TLS, 2: HTTP/2, 3: HTTP/3).
func s68Ask(t *testing.T, n *Node, proto int, sni, host, path string) s68Answer {
	t.Helper()
	addr := n.tls.ln.Addr().String()
	tc := &tls.Config{InsecureSkipVerify: true, ServerName: sni} //nolint:gosec // test certificates
	var rt http.RoundTripper
	switch proto {
	case 1:
		c, err := s11tlsDial(addr, sni)
		if err != nil {
			t.Fatalf("dial: %v", err)
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		_, _ = io.WriteString(c, "GET "+path+" HTTP/1.1\r\nHost: "+host+"\r\n\r\n")
		resp, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: "GET"})
		if err != nil {
			t.Fatalf("SNI %q Host %q: %v", sni, host, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return s68Answer{proto: 1, status: resp.StatusCode, body: string(b), names: c.ConnectionState().PeerCertificates[0].DNSNames, header: resp.Header}
	case 2:
		tr := &http.Transport{TLSClientConfig: tc, ForceAttemptHTTP2: true, DisableCompression: true}
		defer tr.CloseIdleConnections()
		rt = tr
	case 3:
		tc.NextProtos = []string{http3.NextProtoH3}
		tr := &http3.Transport{TLSClientConfig: tc, DisableCompression: true,
			Dial: func(ctx context.Context, _ string, tc *tls.Config, qc *quic.Config) (*quic.Conn, error) {
				return quic.DialAddr(ctx, addr, tc, qc)
			}}
		defer tr.Close()
		rt = tr
	}
	req, _ := http.NewRequest("GET", "https://"+addr+path, nil)
	req.Host = host
	cl := &http.Client{Transport: rt, Timeout: 10 * time.Second}
	resp, err := cl.Do(req)
	if err != nil {
		t.Fatalf("HTTP/%d SNI %q Host %q: %v", proto, sni, host, err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.ProtoMajor != proto {
		t.Fatalf("asked HTTP/%d, got %s", proto, resp.Proto)
	}
	var names []string
	if resp.TLS != nil && len(resp.TLS.PeerCertificates) > 0 {
		names = resp.TLS.PeerCertificates[0].DNSNames
	}
	return s68Answer{proto: proto, status: resp.StatusCode, body: string(b), names: names, header: resp.Header}
}

// s68Modes are the fronts: net/http alone (hit path off, net/http's
// HTTP/2), and the hit paths (HTTP/1.1 loop, edge's HTTP/2 server).
var s68Modes = []struct{ name, tuning string }{
	{"net/http", "tuning: {hit_path: false, http2_server: go}\n"},
	{"hit paths", "tuning: {hit_path: true, http2_server: edge}\n"},
}

// TestS68HostOutsideTheCertificateIsMisdirected: SNI a.test (the
// certificate names a.test only) and Host/:authority b.test, a site with
// a certificate of its own. RFC 9110 §7.4 says the request MUST be
// rejected (421); the edge serves b.test's page, on every protocol and
// front, from the store (the hit paths) as from ServeHTTP.
func TestS68HostOutsideTheCertificateIsMisdirected(t *testing.T) {
	for _, m := range s68Modes {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			n := s68Node(t, m.tuning)
			for _, proto := range []int{1, 2, 3} {
				// b.test's page, filled and stored over its own handshake.
				for range 2 {
					if a := s68Ask(t, n, proto, "b.test", "b.test", "/p"); a.status != 200 || a.body != "site=b path=/p" {
						t.Fatalf("control, SNI b.test Host b.test: %v", a)
					}
					n.Proxy().Wait()
				}
				// Coalescing the certificate allows: served.
				if a := s68Ask(t, n, proto, "x.w.test", "y.w.test", "/p"); a.status != 200 {
					t.Errorf("control, SNI x.w.test Host y.w.test (one certificate names both): %v", a)
				}
				before := s68Hits(n)
				a := s68Ask(t, n, proto, "a.test", "b.test", "/p")
				hit := s68Hits(n) - before
				if a.status != http.StatusMisdirectedRequest || strings.Contains(a.body, "site=b") {
					t.Errorf("HTTP/%d, SNI a.test, Host b.test: %v (hit path answered %d); want 421: the certificate does not cover b.test (RFC 9110 §7.4)", proto, a, hit)
				}
			}
		})
	}
}

// s68Hits counts the answers of the hit paths: the HTTP/1.1 loop's and
// edge's HTTP/2 server's read loop's.
func s68Hits(n *Node) int64 {
	h := int64(n.hitM.Stats().Answered)
	if n.tls.h2 != nil {
		h += n.tls.h2.Stats().Hits
	}
	return h
}

// TestS68NoSNIGetsTheFirstCertificate records what a client without SNI
// (an IP literal) gets: the first certificate (a.test), and whichever
// site its Host names. Not asserted: RFC 9110 §7.4 would refuse b.test
// here too, but health checks often connect so (curl -k -H Host:); the
// report weighs it.
func TestS68NoSNIGetsTheFirstCertificate(t *testing.T) {
	n := s68Node(t, s68Modes[1].tuning)
	for _, host := range []string{"a.test", "b.test", "y.w.test"} {
		for _, proto := range []int{1, 2, 3} {
			a := s68Ask(t, n, proto, "", host, "/q")
			t.Logf("no SNI, Host %s: %v", host, a)
			if len(a.names) != 1 || a.names[0] != "a.test" {
				t.Errorf("no SNI: certificate %v, want the first (a.test)", a.names)
			}
		}
	}
}
