package node

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/quic-go/quic-go"
)

// s24h2SitesNode runs two sites (a.test, b.test), each origin echoing its
// site and the target it was asked, behind a node with the plain
// listener, the TLS listener (the given HTTP/2 server) and HTTP/3.
func s24h2SitesNode(t *testing.T, server string) *Node {
	t.Helper()
	originFor := func(site string) string {
		o := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Cache-Control", "public, max-age=600")
			fmt.Fprintf(w, "site=%s target=%s", site, r.RequestURI)
		}))
		t.Cleanup(o.Close)
		return o.URL
	}
	oa, ob := originFor("A"), originFor("B")
	cp, kp := writePair(t, t.TempDir(), "a", []string{"a.test", "b.test"}, 1)
	return startNodeYAML(t, "listen: '"+freeAddr(t)+"'\nadmin: {listen: '"+freeAddr(t)+"'}\n"+
		"tls: {listen: '127.0.0.1:0', cert_file: '"+cp+"', key_file: '"+kp+"', http3: true}\n"+
		"tuning: {hit_path: true, http2_server: "+server+"}\n"+
		"sites:\n  - name: a\n    hosts: [a.test]\n    origins: ['"+oa+"']\n"+
		"  - name: b\n    hosts: [b.test]\n    origins: ['"+ob+"']\n")
}

// s24h2H3Ask sends one raw HTTP/3 request and returns its status and body.
func s24h2H3Ask(t *testing.T, c *rawH3, fields [][2]string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := c.conn.OpenStreamSync(ctx)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = s.Write(headersFrame(fields))
	_ = s.Close()
	_ = s.SetReadDeadline(time.Now().Add(5 * time.Second))
	status, hdr, body, err := readH3Response(t, s)
	if status == "" {
		return fmt.Sprintf("no response (%v)", err)
	}
	return fmt.Sprintf("%s %q %q", status, hdr.Get("cache-status"), body)
}

// TestS24H2HostileRequestsKeyAsHTTP11Does: requests only HTTP/2 or HTTP/3
// can frame (:authority beside a disagreeing host field, no :authority,
// an absolute-form or "*" :path, cookie crumbs, dot segments, escapes)
// fill the cache first; then an HTTP/1.1 client asks every (host, target)
// those fills could have been stored under and must get its own site's
// answer for its own target (the origin echoes both). Holds for edge's
// HTTP/2 server and net/http's.
func TestS24H2HostileRequestsKeyAsHTTP11Does(t *testing.T) {
	for _, server := range []string{"edge", "go"} {
		t.Run(server, func(t *testing.T) {
			n := s24h2SitesNode(t, server)
			h2 := rvH2Dial(t, n.tls.ln.Addr().String())
			h3 := dialRawH3(t, n, &quic.Config{})
			g := func(extra ...string) []string {
				return append([]string{":method", "GET", ":scheme", "https"}, extra...)
			}
			h2reqs := [][]string{
				g(":authority", "a.test", ":path", "/k1", "host", "b.test"),
				g(":authority", "b.test", ":path", "/k2", "host", "a.test"),
				g(":path", "/k3", "host", "b.test"),
				g(":authority", "b.test", ":path", "http://a.test/k4"),
				g(":authority", "b.test", ":path", "https://a.test"),
				g(":authority", "a.test", ":path", "http:k5"),
				g(":authority", "a.test", ":path", "/k6/../k7"),
				g(":authority", "a.test", ":path", "/k8%2f..%2fk9"),
				g(":authority", "a.test", ":path", "/k10", "cookie", "a=1", "cookie", "sid=alice"),
				g(":authority", "a.test", ":path", "/k11 x"),
				g(":authority", "A.TEST:8443", ":path", "/k12"),
				{":method", "GET", ":scheme", "http", ":authority", "b.test", ":path", "/k13"},
				{":method", "HEAD", ":scheme", "https", ":authority", "a.test", ":path", "/k14"},
			}
			id := uint32(1)
			for range 2 {
				for _, f := range h2reqs {
					t.Logf("h2 %v: %s", f[4:], h2.ask(id, f...))
					id += 2
					n.Proxy().Wait()
				}
			}
			h3reqs := [][][2]string{
				reqFields("GET", "a.test", "/k15", [2]string{"host", "a.test"}),
				reqFields("GET", "b.test", "/k16", [2]string{"host", "a.test"}),
				{{":method", "GET"}, {":scheme", "https"}, {":path", "/k17"}, {"host", "b.test"}},
				reqFields("GET", "b.test", "/k18/../k19"),
			}
			for range 2 {
				for _, f := range h3reqs {
					t.Logf("h3 %v: %s", f, s24h2H3Ask(t, h3, f))
					n.Proxy().Wait()
				}
			}
			targets := []string{"/", "/k1", "/k2", "/k3", "/k4", "/k5", "/k6/../k7", "/k7", "/k8%2f..%2fk9", "/k9", "/k10",
				"/k11%20x", "/k12", "/k13", "/k14", "/k15", "/k16", "/k17", "/k18/../k19", "/k19"}
			for _, host := range []string{"a.test", "b.test"} {
				for _, target := range targets {
					r, body := rawAsk(t, n.PublicAddr(), "GET "+target+" HTTP/1.1\r\nHost: "+host+"\r\nConnection: close\r\n\r\n")
					want := fmt.Sprintf("site=%s target=%s", strings.ToUpper(host[:1]), target)
					if body != want {
						t.Errorf("HTTP/1.1 %s%s got %q (Cache-Status %q), want %q", host, target, body, r.Header.Get("Cache-Status"), want)
					}
				}
			}
		})
	}
}
