package node

import (
	"context"
	"crypto/tls"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
)

// TestS70SameNameStillResumes: the ticket check must not cost the
// resumption it exists to keep: a session of a.test offered back for
// a.test resumes, over TLS 1.2, TLS 1.3 and HTTP/3, and the request on it
// is served.
func TestS70SameNameStillResumes(t *testing.T) {
	n := s68Node(t, s68Modes[1].tuning)
	addr := n.tls.ln.Addr().String()
	for _, v := range []struct {
		name    string
		version uint16
	}{{"TLS 1.2", tls.VersionTLS12}, {"TLS 1.3", tls.VersionTLS13}} {
		t.Run(v.name, func(t *testing.T) {
			cache := &s68OneSession{}
			if resumed, _, st, _ := s68Resume(t, addr, "a.test", "a.test", v.version, cache); resumed || st != 200 {
				t.Fatalf("first: resumed %v status %d", resumed, st)
			}
			for i := range 2 {
				resumed, _, st, body := s68Resume(t, addr, "a.test", "a.test", v.version, cache)
				if !resumed || st != 200 {
					t.Errorf("%s connection %d for a.test with a.test's session: resumed %v, %d %q; want resumed", v.name, i+2, resumed, st, body)
				}
			}
			// Another spelling of the same name (DNS names are case-blind).
			resumed, _, st, body := s68Resume(t, addr, "A.TEST", "a.test", v.version, cache)
			t.Logf("%s: SNI A.TEST with a.test's session: resumed %v, %d %q", v.name, resumed, st, body)
			if st != 200 {
				t.Errorf("%s: SNI A.TEST Host a.test: %d %q", v.name, st, body)
			}
		})
	}
	t.Run("HTTP/3", func(t *testing.T) {
		cache := tls.NewLRUClientSessionCache(4)
		ask := func() (bool, int) {
			tc := &tls.Config{InsecureSkipVerify: true, ServerName: "a.test", NextProtos: []string{http3.NextProtoH3}, ClientSessionCache: cache} //nolint:gosec // test certificates
			tr := &http3.Transport{TLSClientConfig: tc, DisableCompression: true,
				Dial: func(ctx context.Context, _ string, tc *tls.Config, qc *quic.Config) (*quic.Conn, error) {
					return quic.DialAddr(ctx, addr, tc, qc)
				}}
			defer tr.Close()
			req, _ := http.NewRequest("GET", "https://a.test/h3", nil)
			resp, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Do(req)
			if err != nil {
				t.Fatalf("HTTP/3: %v", err)
			}
			_, _ = io.ReadAll(resp.Body)
			resp.Body.Close()
			return resp.TLS != nil && resp.TLS.DidResume, resp.StatusCode
		}
		if _, st := ask(); st != 200 {
			t.Fatalf("first HTTP/3: %d", st)
		}
		if resumed, st := ask(); !resumed || st != 200 {
			t.Errorf("HTTP/3 with a.test's session: resumed %v, %d; want resumed", resumed, st)
		}
	})
}

// TestS70SpellingsOfTheHandshakeName: an upper-case SNI names the same
// host as the lower-case Host; neither front may call it misdirected.
func TestS70SpellingsOfTheHandshakeName(t *testing.T) {
	for _, m := range s68Modes {
		t.Run(m.name, func(t *testing.T) {
			n := s68Node(t, m.tuning)
			for _, proto := range []int{1, 2, 3} {
				for range 2 {
					if a := s68Ask(t, n, proto, "A.Test", "a.test", "/c"); a.status != 200 || a.body != "site=a path=/c" {
						t.Errorf("HTTP/%d SNI A.Test Host a.test: %v", proto, a)
					}
					if a := s68Ask(t, n, proto, "X.W.TEST", "Y.w.test", "/c"); a.status != 200 || a.body != "site=w path=/c" {
						t.Errorf("HTTP/%d SNI X.W.TEST Host Y.w.test: %v", proto, a)
					}
					n.Proxy().Wait()
				}
			}
		})
	}
}

// TestS70WildcardCertificateCoversItsSiblings: one certificate for
// *.w.test; a connection for x.w.test carries y.w.test (the certificate
// the client checked names it), on every protocol and front, but not
// w.test or a.b.w.test, which the wildcard does not cover.
func TestS70WildcardCertificateCoversItsSiblings(t *testing.T) {
	o := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=600")
		io.WriteString(w, "host="+r.Host)
	}))
	t.Cleanup(o.Close)
	for _, m := range s68Modes {
		t.Run(m.name, func(t *testing.T) {
			dir := t.TempDir()
			ca, ka := writePair(t, dir, "a", []string{"a.test"}, 1)
			cw, kw := writePair(t, dir, "w", []string{"*.w.test"}, 2)
			n := startNodeYAML(t, "listen: '"+freeAddr(t)+"'\nadmin: {listen: '"+freeAddr(t)+"'}\nnode_id: n1\n"+
				"tls:\n  listen: '127.0.0.1:0'\n  cert_file: '"+ca+"'\n  key_file: '"+ka+"'\n  http3: true\n"+
				"  certificates:\n    - {cert_file: '"+cw+"', key_file: '"+kw+"'}\n"+m.tuning+
				"sites:\n  - name: w\n    hosts: [x.w.test, y.w.test, w.test, a.b.w.test]\n    origins: ['"+o.URL+"']\n")
			for _, proto := range []int{1, 2, 3} {
				for range 2 {
					if a := s68Ask(t, n, proto, "x.w.test", "y.w.test", "/p"); a.status != 200 {
						t.Errorf("HTTP/%d SNI x.w.test Host y.w.test (*.w.test): %v", proto, a)
					}
					n.Proxy().Wait()
				}
				for _, host := range []string{"w.test", "a.b.w.test"} {
					if a := s68Ask(t, n, proto, "x.w.test", host, "/p"); a.status != http.StatusMisdirectedRequest {
						t.Errorf("HTTP/%d SNI x.w.test Host %s (*.w.test does not cover it): %v; want 421", proto, host, a)
					}
				}
			}
		})
	}
}
