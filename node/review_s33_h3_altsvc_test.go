package node

// A hostile review (s33) of HTTP/3: what Alt-Svc tells clients.

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// s33hAltOrigin answers every path with a cacheable page carrying the
// origin's own Alt-Svc (what an nginx or Caddy origin with QUIC on sends).
func s33hAltOrigin(t *testing.T, alt string) *httptest.Server {
	t.Helper()
	o := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=600")
		w.Header().Set("Alt-Svc", alt)
		_, _ = io.WriteString(w, "page")
	}))
	t.Cleanup(o.Close)
	return o
}

// s33hHTTPS is a client of the node's TLS listener over TCP (HTTP/1.1).
func s33hHTTPS(n *Node) *http.Client {
	addr := h3Addr(n)
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true, ServerName: "a.test"}, //nolint:gosec // test certificate
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, network, addr)
		},
	}}
}

// A review found (now mended): the origin's Alt-Svc replaces the edge's own HTTP/3
// advertisement.
// Steps: a node with tls.http3 on; its origin answers with
// `Alt-Svc: clear` (or `h3=":1"; ma=2592000`, the origin's own QUIC
// port); a client asks over HTTP/3 and over HTTPS, a miss then a hit.
// Expected: the edge's `h3=":PORT"; ma=86400` (docs/operations.md: "HTTPS
// responses carry Alt-Svc: h3=":PORT"; ma=86400"): an Alt-Svc names
// alternatives of the server that sends it (RFC 7838), and the origin's
// endpoints are not the edge's, whose clients reach it at another address.
// Got: the origin's value alone. tlsFront.wrap sets the edge's field
// before the handler, and the proxy's setEntryHeader and stream copy the
// origin's fields over the header with hdr[k] = v, so Alt-Svc is
// replaced. Why it matters: `clear` (or any Alt-Svc the origin sends)
// silently turns HTTP/3 off for every browser of that site, and an origin
// port or host is cached by browsers for the origin's ma (30 days here)
// as an endpoint of the edge's name, where nothing may listen (or someone
// else does). The same holds without tls.http3: the origin's Alt-Svc
// reaches clients of the edge as is.
func TestS33H3OriginAltSvcDoesNotReplaceTheEdges(t *testing.T) {
	t.Parallel()
	for _, alt := range []string{"clear", `h3=":1"; ma=2592000`} {
		o := s33hAltOrigin(t, alt)
		n := startH3Node(t, o.URL, "")
		want := `h3=":` + n.tls.port + `"; ma=86400`
		for _, c := range []struct {
			name string
			cl   *http.Client
		}{{"h3", h3Client(n)}, {"https", s33hHTTPS(n)}} {
			for _, round := range []string{"first request", "second request"} {
				resp, err := c.cl.Get("https://a.test/alt")
				if err != nil {
					t.Fatal(err)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				got := resp.Header.Values("Alt-Svc")
				t.Logf("origin %q, %s %s (%s): Alt-Svc %q", alt, c.name, round, resp.Header.Get("Cache-Status"), got)
				if len(got) != 1 || got[0] != want {
					t.Errorf("origin Alt-Svc %q: a %s client got Alt-Svc %q on a %s, want the edge's %q", alt, c.name, got, round, want)
				}
			}
		}
	}
}

// A review found (now mended) (the same cause, HTTP/3 off): an edge that serves no HTTP/3
// advertises the origin's.
// Steps: a node with a TLS listener and tls.http3 off; its origin answers
// with `Alt-Svc: h3=":443"; ma=2592000` (an nginx origin with QUIC on);
// an HTTPS client asks twice.
// Expected: no Alt-Svc: the edge offers no alternative service.
// Got: the origin's field, on the miss and from the cache on the hit.
// Why it matters: browsers try QUIC at the edge's address on the origin's
// port for 30 days: on :443 UDP, where nothing answers, every first
// connection of theirs waits for the QUIC attempt to fail (or reaches
// whatever else listens there under the edge's name).
func TestS33H3NoAltSvcWithoutHTTP3(t *testing.T) {
	t.Parallel()
	o := s33hAltOrigin(t, `h3=":443"; ma=2592000`)
	cp, kp := writePair(t, t.TempDir(), "a", []string{"a.test"}, 1)
	n := startNode(t, o.URL, "tls: {listen: '127.0.0.1:0', cert_file: '"+cp+"', key_file: '"+kp+"'}\n")
	cl := s33hHTTPS(n)
	for _, round := range []string{"first request", "second request"} {
		resp, err := cl.Get("https://a.test/alt")
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if got := resp.Header.Values("Alt-Svc"); len(got) > 0 {
			t.Errorf("an edge without HTTP/3 sent Alt-Svc %q on the %s (%s): the origin's, not its own", got, round, resp.Header.Get("Cache-Status"))
		}
	}
}
