package node

// A hostile review of the HTTPS listener's hit path: SNI for one host and
// Host for another, Host spellings with ports, the fields HTTPS adds
// (Cache-Status, Strict-Transport-Security, Alt-Svc), and HTTP/2 by ALPN
// never entering the HTTP/1.1 loop. Each compared with net/http alone.

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// s11tlsHostNodes: two nodes (hit path off, on) with sites a.test and
// b.test on origins of their own, one certificate for a.test only, HSTS
// and HTTP/3 (Alt-Svc) on.
func s11tlsHostNodes(t *testing.T, extra string) [2]*Node {
	t.Helper()
	originFor := func(site string) *httptest.Server {
		o := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Cache-Control", "max-age=600")
			w.Header().Set("Content-Type", "text/plain")
			fmt.Fprintf(w, "site=%s path=%s host=%s proto=%s", site, r.URL.RequestURI(), r.Header.Get("X-Forwarded-Host"), r.Header.Get("X-Forwarded-Proto"))
		}))
		t.Cleanup(o.Close)
		return o
	}
	oa, ob := originFor("a"), originFor("b")
	cp, kp := writePair(t, t.TempDir(), "a", []string{"a.test"}, 1)
	var ns [2]*Node
	for i, on := range []bool{false, true} {
		ns[i] = startNodeYAML(t, "listen: '"+freeAddr(t)+"'\nadmin: {listen: '"+freeAddr(t)+"'}\nnode_id: n1\n"+
			"tls: {listen: '127.0.0.1:0', cert_file: '"+cp+"', key_file: '"+kp+"', hsts: 'max-age=300; includeSubDomains', http3: true}\n"+
			hitPathYAML(on)+extra+
			"sites:\n  - name: a\n    hosts: [a.test]\n    origins: ['"+oa.URL+"']\n  - name: b\n    hosts: [b.test]\n    origins: ['"+ob.URL+"']\n")
	}
	return ns
}

// s11tlsAsk sends head on a new TLS connection with SNI sni and returns
// the answer: status, fields (without Date and Age, Alt-Svc's port
// replaced) and body.
func s11tlsAsk(t *testing.T, n *Node, sni, head, method string) string {
	t.Helper()
	c, err := s11tlsDial(n.tls.ln.Addr().String(), sni)
	if err != nil {
		t.Error(err)
		return err.Error()
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	_, _ = io.WriteString(c, head)
	resp, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: method})
	if err != nil {
		return "ERR " + err.Error()
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	h := resp.Header.Clone()
	h.Del("Date")
	h.Del("Age")
	if v := h.Get("Alt-Svc"); v != "" {
		h.Set("Alt-Svc", strings.ReplaceAll(v, portOf(n.tls.ln.Addr().String()), "PORT"))
	}
	var s strings.Builder
	_ = h.Write(&s)
	return fmt.Sprintf("%d\n%s\n%s", resp.StatusCode, s.String(), b)
}

// TestS11TLSHostAndSNIAgree: requests whose Host differs from the SNI
// (a hit for b.test on a connection whose certificate is a.test's, and no
// SNI at all), Hosts with ports and other spellings, HEAD and
// Connection: close, get the same answer with the hit path as without,
// fields included, and the hit path answers the hits.
func TestS11TLSHostAndSNIAgree(t *testing.T) {
	for _, extra := range []string{"", "cache: {key_scheme: true}\n"} {
		t.Run(strings.TrimSpace(extra), func(t *testing.T) {
			t.Parallel()
			s11tlsHostAndSNIAgree(t, extra)
		})
	}
}

func s11tlsHostAndSNIAgree(t *testing.T, extra string) {
	ns := s11tlsHostNodes(t, extra)
	type rq struct{ sni, host, method, extra string }
	reqs := []rq{
		{"a.test", "a.test", "GET", ""},
		{"a.test", "b.test", "GET", ""},
		{"b.test", "b.test", "GET", ""},
		{"b.test", "a.test", "GET", ""},
		{"", "b.test", "GET", ""},
		{"a.test", "b.test:443", "GET", ""},
		{"a.test", "B.TEST:8443", "GET", ""},
		{"a.test", "b.test.", "GET", ""},
		{"a.test", "b.test.:443", "GET", ""},
		{"a.test", "b.test:", "GET", ""},
		{"a.test", "b.test:x", "GET", ""},
		{"a.test", "unknown.test", "GET", ""},
		{"a.test", "127.0.0.1", "GET", ""},
		{"a.test", "[::1]:443", "GET", ""},
		{"a.test", "b.test", "HEAD", ""},
		{"a.test", "b.test", "GET", "Connection: close\r\n"},
		{"a.test", "b.test", "GET", "Accept-Encoding: gzip\r\n"},
	}
	head := func(r rq) string {
		return r.method + " /p HTTP/1.1\r\nHost: " + r.host + "\r\n" + r.extra + "\r\n"
	}
	for _, n := range ns { // fill both sites under every spelling, twice
		for _, r := range reqs {
			for range 2 {
				s11tlsAsk(t, n, r.sni, strings.Replace(head(r), "HEAD", "GET", 1), "GET")
				n.Proxy().Wait()
			}
		}
	}
	before := ns[1].hitM.Stats().Answered
	var wg sync.WaitGroup
	for _, r := range reqs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			want := s11tlsAsk(t, ns[0], r.sni, head(r), r.method)
			got := s11tlsAsk(t, ns[1], r.sni, head(r), r.method)
			if got != want {
				t.Errorf("SNI %q, Host %q, %s %q:\n without the hit path:\n%s\n with it:\n%s", r.sni, r.host, r.method, r.extra, want, got)
			}
			if strings.HasPrefix(want, "200") && !strings.Contains(want, "Strict-Transport-Security: max-age=300; includeSubDomains") {
				t.Errorf("SNI %q, Host %q: no HSTS on an HTTPS answer:\n%s", r.sni, r.host, want)
			}
		}()
	}
	wg.Wait()
	// Since 2026-12-07 a Host the connection's certificate does not name
	// is 421 on both (RFC 9110 §7.4), and the hit path leaves every Host
	// other than the SNI to net/http: it answers the hits of a.test over
	// SNI a.test, of b.test over SNI b.test and of b.test without SNI.
	if d := ns[1].hitM.Stats().Answered - before; d < 3 {
		t.Errorf("the hit path answered %d of the hits", d)
	}
}

// TestS11TLSHTTP2NeverEntersTheLoop: connections that negotiate HTTP/2 by
// ALPN (with either HTTP/2 server) are never wrapped by the HTTP/1.1
// loop, and a client without ALPN is HTTP/1.1, in the loop.
func TestS11TLSHTTP2NeverEntersTheLoop(t *testing.T) {
	for _, server := range []string{"edge", "go"} {
		t.Run(server, func(t *testing.T) {
			t.Parallel()
			o := reviewOrigin(t)
			cp, kp := writePair(t, t.TempDir(), "a", []string{"a.test"}, 1)
			n := startNode(t, o.URL, "tls: {listen: '127.0.0.1:0', cert_file: '"+cp+"', key_file: '"+kp+"'}\n"+
				"tuning: {hit_path: true, http2_server: "+server+"}\n")
			s11tlsWarm(t, n, "/a")
			before := n.hitM.Stats()
			cl := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
				TLSClientConfig:   &tls.Config{InsecureSkipVerify: true, ServerName: "a.test"}, //nolint:gosec // test
				ForceAttemptHTTP2: true,
			}}
			defer cl.CloseIdleConnections()
			for range 5 {
				req, _ := http.NewRequest("GET", "https://"+n.tls.ln.Addr().String()+"/a", nil)
				req.Host = "a.test"
				resp, err := cl.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.ProtoMajor != 2 {
					t.Fatalf("negotiated %s", resp.Proto)
				}
				if !strings.Contains(resp.Header.Get("Cache-Status"), "hit") {
					t.Errorf("h2: Cache-Status %q", resp.Header.Get("Cache-Status"))
				}
			}
			after := n.hitM.Stats()
			// Connections is the loop's open gauge: the warm-up's own
			// connection may close meanwhile (it did under two busy
			// loops, 1→0); only a rise would be HTTP/2 in the loop.
			if after.Answered != before.Answered || after.Connections > before.Connections {
				t.Errorf("HTTP/2 went through the HTTP/1.1 loop: answered %d→%d, connections %d→%d", before.Answered, after.Answered, before.Connections, after.Connections)
			}
			// A client without ALPN: HTTP/1.1, in the loop.
			c, err := tls.Dial("tcp", n.tls.ln.Addr().String(), &tls.Config{InsecureSkipVerify: true, ServerName: "a.test"}) //nolint:gosec // test
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			_, _ = io.WriteString(c, "GET /a HTTP/1.1\r\nHost: a.test\r\n\r\n")
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if n.hitM.Stats().Answered == after.Answered {
				t.Errorf("a client without ALPN was not answered by the loop")
			}
		})
	}
}
