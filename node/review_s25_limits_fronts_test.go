package node

import (
	"crypto/tls"
	"encoding/json"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"
)

// HOLDS: a reload lowering limits.max_connections to 1 while one plain
// connection is open refuses a new connection on every front (plain
// HTTP/1.1 with the hit path, TLS HTTP/1.1, HTTP/2, HTTP/3), the status
// page and edge_client_connections_limit show the new bound at once, and a
// reload back lets them all in again.
func TestS25LoweredMaxConnectionsHoldsOnEveryFront(t *testing.T) {
	o, _, _ := s25Origin(t)
	cp, kp := writePair(t, t.TempDir(), "a", []string{"a.test"}, 1)
	body := "tls: {listen: '127.0.0.1:0', cert_file: '" + cp + "', key_file: '" + kp + "', http3: true}\ntuning: {hit_path: true}\n" +
		"sites:\n" + s7Site("a", []string{"a.test"}, []string{o.URL}, "")
	n := startS7Node(t, body)
	tlsAddr := n.tls.ln.Addr().String()
	tcfg := func(proto string) *tls.Config {
		return &tls.Config{InsecureSkipVerify: true, ServerName: "a.test", NextProtos: []string{proto}} //nolint:gosec // test certificate
	}
	try := func() map[string]bool {
		out := map[string]bool{}
		c, err := net.Dial("tcp", n.pub)
		if err == nil {
			_ = c.SetDeadline(time.Now().Add(3 * time.Second))
			_, _ = c.Write([]byte("GET /hit-x HTTP/1.1\r\nHost: a.test\r\nConnection: close\r\n\r\n"))
			buf := make([]byte, 12)
			k, _ := c.Read(buf)
			out["plain"] = strings.HasPrefix(string(buf[:k]), "HTTP/1.1 200")
			c.Close()
		}
		h1 := &http.Client{Timeout: 3 * time.Second, Transport: &http.Transport{TLSClientConfig: tcfg("http/1.1"), DisableKeepAlives: true}}
		req, _ := http.NewRequest("GET", "https://"+tlsAddr+"/hit-x", nil)
		req.Host = "a.test"
		if resp, err := h1.Do(req); err == nil {
			out["tls-h1"] = resp.StatusCode == 200
			resp.Body.Close()
		}
		h2 := &http.Client{Timeout: 3 * time.Second, Transport: &http2.Transport{TLSClientConfig: tcfg("h2")}} //nolint:staticcheck // x/net's transport: HTTP/2 alone, no fallback
		if resp, err := h2.Do(req); err == nil {
			out["h2"] = resp.StatusCode == 200 && resp.ProtoMajor == 2
			resp.Body.Close()
		}
		h2.CloseIdleConnections()
		h3 := h3Client(n.Node)
		h3.Timeout = 3 * time.Second
		if resp, err := h3.Get("https://a.test/hit-x"); err == nil {
			out["h3"] = resp.StatusCode == 200
			resp.Body.Close()
		}
		h3.CloseIdleConnections()
		return out
	}
	limit := func() (float64, int) {
		_, m := n.admin("GET", "/metrics")
		var v float64 = -1
		for _, l := range strings.Split(m, "\n") {
			if f := strings.Fields(l); len(f) == 2 && f[0] == "edge_client_connections_limit" {
				_ = json.Unmarshal([]byte(f[1]), &v)
			}
		}
		_, st := n.admin("GET", "/status.json")
		var s struct {
			C struct{ Max int } `json:"client_connections"`
		}
		_ = json.Unmarshal([]byte(st), &s)
		return v, s.C.Max
	}
	if got := try(); !got["plain"] || !got["tls-h1"] || !got["h2"] || !got["h3"] {
		t.Fatalf("before the reload not every front answered: %v", got)
	}
	held, err := net.Dial("tcp", n.pub)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	time.Sleep(100 * time.Millisecond) // accepted and counted
	if code, b := n.reload("limits: {max_connections: 1}\n" + body); code != 200 {
		t.Fatalf("reload: %d %s", code, b)
	}
	if m, s := limit(); m != 1 || s != 1 {
		t.Errorf("after max_connections 1: edge_client_connections_limit %v, status max %d; want 1 and 1", m, s)
	}
	if got := try(); got["plain"] || got["tls-h1"] || got["h2"] || got["h3"] {
		t.Errorf("a front answered a new connection over max_connections 1 (one held): %v", got)
	}
	if code, b := n.reload(body); code != 200 {
		t.Fatalf("reload: %d %s", code, b)
	}
	if m, s := limit(); m <= 1 || s <= 1 {
		t.Errorf("after the bound went back: edge_client_connections_limit %v, status max %d", m, s)
	}
	if got := try(); !got["plain"] || !got["tls-h1"] || !got["h2"] || !got["h3"] {
		t.Errorf("after the bound went back not every front answered: %v", got)
	}
}
