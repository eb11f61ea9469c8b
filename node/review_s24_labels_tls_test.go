package node

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// s24lTLSNode runs a node with TLS, HTTP/2, HTTP/3 and the hit path on,
// serving a.test.
func s24lTLSNode(t *testing.T) *Node {
	t.Helper()
	o := s24lOrigin(t)
	cp, kp := writePair(t, t.TempDir(), "a", []string{"a.test"}, 1)
	return startNodeYAML(t, "node_id: s24\nlisten: '"+freeAddr(t)+"'\nadmin: {listen: '"+freeAddr(t)+"'}\n"+
		"tls: {listen: '127.0.0.1:0', cert_file: '"+cp+"', key_file: '"+kp+"', http3: true}\ntuning: {hit_path: true}\n"+
		"sites:\n  - name: a\n    hosts: [a.test]\n    origins: ['"+o.URL+"']\n")
}

// s24lTLSTraffic asks over HTTPS/1.1, HTTP/2 and HTTP/3 with SNI and Host
// values tagged with tag; it returns how many answers came back and
// closes every client's connections.
func s24lTLSTraffic(t *testing.T, n *Node, tag string, k int) int {
	t.Helper()
	addr := h3Addr(n)
	answered := 0
	mk := func(h2 bool, sni string) *http.Client {
		tc := &tls.Config{InsecureSkipVerify: true, ServerName: sni} //nolint:gosec // test certificate
		tr := &http.Transport{TLSClientConfig: tc, ForceAttemptHTTP2: h2, DisableCompression: true,
			DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				return (&net.Dialer{}).DialContext(ctx, "tcp", addr)
			}}
		if !h2 {
			tr.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
		}
		return &http.Client{Timeout: 5 * time.Second, Transport: tr}
	}
	clients := []*http.Client{mk(false, tag+".sni.test"), mk(true, tag+"-h2.sni.test"), h3Client(n)}
	for i := 0; i < k; i++ {
		v := fmt.Sprintf("%s%d", tag, i)
		for _, c := range clients {
			for _, host := range []string{"a.test", "A.TEST.", "a.test:" + fmt.Sprint(2000+i), "unknown-" + v + ".test", "a.test:x" + v} {
				for _, path := range []string{"/hit", "/p/" + v + "?s=" + fmt.Sprint(200+i%300) + "&ce=" + v} {
					req, _ := http.NewRequest("GET", "https://a.test"+path, nil)
					req.Host = host
					req.Header.Set("Accept-Encoding", v+", gzip")
					resp, err := c.Do(req)
					if err != nil {
						continue
					}
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					answered++
				}
			}
			req, _ := http.NewRequest("X"+strings.ToUpper(tag), "https://a.test/m/"+v, nil)
			if resp, err := c.Do(req); err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				answered++
			}
		}
	}
	for _, c := range clients {
		c.CloseIdleConnections()
	}
	return answered
}

// s24lTLSJunk sends a stranger's junk to the TLS port: bytes that are no
// ClientHello, ClientHellos with tagged SNI values that never finish, and
// junk UDP datagrams to the HTTP/3 port.
func s24lTLSJunk(t *testing.T, n *Node, tag string, k int) {
	t.Helper()
	addr := h3Addr(n)
	u, err := net.Dial("udp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer u.Close()
	for i := 0; i < k; i++ {
		v := fmt.Sprintf("%s%d", tag, i)
		if c, err := net.Dial("tcp", addr); err == nil {
			_ = c.SetDeadline(time.Now().Add(2 * time.Second))
			_, _ = io.WriteString(c, "GET / HTTP/1.1\r\nHost: "+v+"\r\n\r\n")
			_, _ = io.Copy(io.Discard, c)
			c.Close()
		}
		// A handshake with an unknown SNI, completed or not (the client
		// gives up at once).
		if c, err := s11tlsDial(addr, "sni-"+v+".test", "h2", v); err == nil {
			c.Close()
		}
		if c, err := net.Dial("tcp", addr); err == nil {
			_, _ = c.Write([]byte{0x16, 0x03, 0x01, 0x00, 0x50, 0x01}) // a ClientHello's first bytes, then gone
			c.Close()
		}
		b := make([]byte, 1200)
		b[0] = 0xc0 // a long-header QUIC packet, garbage after
		copy(b[8:], v)
		_, _ = u.Write(b)
		_, _ = u.Write([]byte(v))
	}
}

// TestS24LabelsTLSInputsAddNoSeries: HTTPS/1.1, HTTP/2 and HTTP/3
// requests with tagged SNI, Host, method, status and coding values, and
// junk on the TLS and QUIC ports, add no series in a second round and put
// no value in a label; every answered request is counted once by protocol
// and once by where the front sent it (site, 421 or 400); the client
// connection gauge returns to 0 once the clients leave, on /metrics and
// on the status page alike.
func TestS24LabelsTLSInputsAddNoSeries(t *testing.T) {
	n := s24lTLSNode(t)
	adm := n.AdminAddr()
	s24lTLSTraffic(t, n, "warm", 2)
	s24lTLSJunk(t, n, "warm", 2)
	m1 := s24lScrape(t, adm)
	a := s24lTLSTraffic(t, n, "zqa", 5)
	s24lTLSJunk(t, n, "zqa", 10)
	m2 := s24lScrape(t, adm)
	b := s24lTLSTraffic(t, n, "zqb", 5)
	s24lTLSJunk(t, n, "zqb", 10)
	m3 := s24lScrape(t, adm)
	s2, s3 := s24lEdgeSeries(m2), s24lEdgeSeries(m3)
	if nw := s24lNew(s2, s3); len(nw) > 0 {
		t.Errorf("round B added %d series: %s", len(nw), strings.Join(nw, "; "))
	}
	for _, tag := range []string{"zqa", "zqb", "warm"} {
		if l := s24lLabelsWith(s3, tag); len(l) > 0 {
			t.Errorf("labels hold the client's value %q: %s", tag, strings.Join(l, "; "))
		}
	}
	d := func(name string) float64 { return s24lSum(m3, name) - s24lSum(m1, name) }
	proto := d("edge_http_requests_by_protocol_total")
	front := d("edge_site_requests_total") + d("edge_misdirected_requests_total") + d("edge_bad_host_requests_total")
	t.Logf("answered %d; by protocol %v, by front %v, edge_requests_total %v", a+b, proto, front, d("edge_requests_total"))
	if proto != float64(a+b) || front != float64(a+b) {
		t.Errorf("%d answers: edge_http_requests_by_protocol_total grew %v, site+misdirected+bad host %v", a+b, proto, front)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		open := s24lSum(s24lScrape(t, adm), "edge_client_connections")
		cc, _ := s24lStatusJSON(t, adm)["client_connections"].(map[string]any)
		if open == 0 && cc["open"] == 0.0 {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("clients gone, edge_client_connections %v, status page %v", open, cc)
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
}
