package node

// The plain listener's redirect to HTTPS and HSTS across sites (s68):
// what the redirect keeps of the target, which host it names, and where
// Strict-Transport-Security appears.

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"
)

// s68Plain sends raw on a new plain connection to addr and returns the
// first answer.
func s68Plain(t *testing.T, addr, raw string) *http.Response {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	_, _ = io.WriteString(c, raw)
	resp, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: "GET"})
	if err != nil {
		t.Fatalf("%q: %v", raw, err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp
}

// TestS68RedirectKeepsTheTargetOnTheRequestedHost: absolute-form targets,
// "//host" paths, backslashes and encoded slashes stay the path of the
// host the request named (RFC 9112 §3.2.2: an absolute-form target's host
// wins over Host), the query is kept, and the redirect is not stored.
func TestS68RedirectKeepsTheTargetOnTheRequestedHost(t *testing.T) {
	o := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=600")
		_, _ = io.WriteString(w, "page")
	}))
	t.Cleanup(o.Close)
	cp, kp := writePair(t, t.TempDir(), "a", []string{"a.test"}, 1)
	n := startNodeYAML(t, "listen: '"+freeAddr(t)+"'\nadmin: {listen: '"+freeAddr(t)+"'}\nnode_id: n1\n"+
		"http: {redirect_to_https: true}\n"+
		"tls: {listen: '127.0.0.1:0', cert_file: '"+cp+"', key_file: '"+kp+"', hsts: 'max-age=300'}\n"+
		"sites:\n  - name: a\n    hosts: [a.test]\n    origins: ['"+o.URL+"']\n")
	port := portOf(n.tls.ln.Addr().String())
	for _, c := range []struct{ target, host, wantHost, wantURI string }{
		{"/p?q=1&r=%2F", "a.test", "a.test", "/p?q=1&r=%2F"},
		{"http://a.test/p?q=1", "evil.test", "a.test", "/p?q=1"},
		{"//evil.test/p", "a.test", "a.test", "//evil.test/p"},
		{"/%2F%2Fevil.test/p", "a.test", "a.test", "/%2F%2Fevil.test/p"},
		{"/\\evil.test/p", "a.test", "a.test", "/%5Cevil.test/p"},
		{"https://a.test/p", "a.test", "a.test", "/p"},
	} {
		raw := "GET " + c.target + " HTTP/1.1\r\nHost: " + c.host + "\r\n\r\n"
		resp := s68Plain(t, n.PublicAddr(), raw)
		loc := resp.Header.Get("Location")
		if resp.StatusCode == http.StatusBadRequest {
			t.Logf("%q: 400", raw)
			continue
		}
		u, err := url.Parse(loc)
		if resp.StatusCode != http.StatusPermanentRedirect || err != nil || u.Scheme != "https" || u.Hostname() != c.wantHost || u.Port() != port || u.RequestURI() != c.wantURI || u.User != nil {
			t.Errorf("%q: %d Location %q, want https://%s:%s%s", raw, resp.StatusCode, loc, c.wantHost, port, c.wantURI)
		}
		if resp.Header.Get("Strict-Transport-Security") != "" {
			t.Errorf("%q: HSTS over plain HTTP (RFC 6797 §7.2)", raw)
		}
	}
	// A host no site serves is redirected too (before the site table):
	// logged for the report.
	resp := s68Plain(t, n.PublicAddr(), "GET /p HTTP/1.1\r\nHost: nosite.test\r\n\r\n")
	t.Logf("Host nosite.test: %d %q", resp.StatusCode, resp.Header.Get("Location"))
}

// TestS68OriginHSTSStaysWithItsSite: site a's origin sends its own
// Strict-Transport-Security (includeSubDomains, preload); site b's does
// not, and tls.hsts is off. b's answers never carry a's field, on any
// protocol or front, once a's pages are stored; and the plain listener's
// answers carry none. Logged: what a's plain answers carry.
func TestS68OriginHSTSStaysWithItsSite(t *testing.T) {
	originFor := func(site, sts string) *httptest.Server {
		o := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Cache-Control", "max-age=600")
			if sts != "" {
				w.Header().Set("Strict-Transport-Security", sts)
			}
			fmt.Fprintf(w, "site=%s", site)
		}))
		t.Cleanup(o.Close)
		return o
	}
	oa, ob := originFor("a", "max-age=63072000; includeSubDomains; preload"), originFor("b", "")
	dir := t.TempDir()
	ca, ka := writePair(t, dir, "a", []string{"a.test"}, 1)
	cb, kb := writePair(t, dir, "b", []string{"b.test", "sub.a.test"}, 2)
	for _, m := range s68Modes {
		t.Run(m.name, func(t *testing.T) {
			n := startNodeYAML(t, "listen: '"+freeAddr(t)+"'\nadmin: {listen: '"+freeAddr(t)+"'}\nnode_id: n1\n"+
				"tls:\n  listen: '127.0.0.1:0'\n  cert_file: '"+ca+"'\n  key_file: '"+ka+"'\n  http3: true\n"+
				"  certificates:\n    - {cert_file: '"+cb+"', key_file: '"+kb+"'}\n"+m.tuning+
				"sites:\n  - name: a\n    hosts: [a.test]\n    origins: ['"+oa.URL+"']\n"+
				"  - name: b\n    hosts: [b.test, sub.a.test]\n    origins: ['"+ob.URL+"']\n")
			for _, path := range []string{"/same", "/same"} {
				for _, host := range []string{"a.test", "b.test", "sub.a.test"} {
					for _, proto := range []int{1, 2, 3} {
						a := s68AskHeader(t, n, proto, host, path)
						if host != "a.test" && a != "" {
							t.Errorf("HTTP/%d %s%s carries %q", proto, host, path, a)
						}
						if host == "a.test" && a == "" {
							t.Errorf("HTTP/%d %s%s: the origin's own HSTS was lost", proto, host, path)
						}
					}
					n.Proxy().Wait()
				}
			}
			for _, host := range []string{"a.test", "b.test"} {
				resp := s68Plain(t, n.PublicAddr(), "GET /same HTTP/1.1\r\nHost: "+host+"\r\n\r\n")
				t.Logf("plain %s: Strict-Transport-Security %q", host, resp.Header.Get("Strict-Transport-Security"))
			}
		})
	}
}

// s68AskHeader asks host's path over proto with a matching SNI and
// returns the answer's Strict-Transport-Security.
func s68AskHeader(t *testing.T, n *Node, proto int, host, path string) string {
	t.Helper()
	a := s68Ask(t, n, proto, host, host, path)
	if a.status != 200 || !strings.HasPrefix(a.body, "site=") {
		t.Fatalf("HTTP/%d %s%s: %v", proto, host, path, a)
	}
	return a.header.Get("Strict-Transport-Security")
}
