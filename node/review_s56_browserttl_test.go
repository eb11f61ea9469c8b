package node

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestS56BrowserTTLOnHTTP3AndHitPathHEAD: the fronts TestBrowserTTLOnEveryFront
// leaves out: HTTP/3 (quic-go's server, ServeHTTP) on the miss and the hit,
// and a HEAD the HTTP/1.1 hit path would answer, all with the rule's
// max-age; a page no rule names keeps the origin's field on HTTP/3 too.
func TestS56BrowserTTLOnHTTP3AndHitPathHEAD(t *testing.T) {
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "public, max-age=3600")
		_, _ = w.Write([]byte("page " + r.URL.Path))
	}))
	defer origin.Close()
	cp, kp := writePair(t, t.TempDir(), "a", []string{"a.test"}, 1)
	n := startNodeYAML(t, "listen: '"+freeAddr(t)+"'\nadmin: {listen: '"+freeAddr(t)+"'}\n"+
		"tls: {listen: '127.0.0.1:0', cert_file: '"+cp+"', key_file: '"+kp+"', http3: true}\n"+
		"tuning: {hit_path: true, http2_server: edge}\n"+
		"sites:\n  - name: a\n    hosts: [a.test]\n    origins: ['"+origin.URL+"']\n"+
		"    rules:\n"+
		"      - {name: pages, match: {path: /p/}, browser_ttl: 10m}\n")
	c := h3Client(n)
	h3 := func(path string) string {
		t.Helper()
		resp, err := c.Get("https://a.test" + path)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.Header.Get("Cache-Control")
	}
	for i := range 2 {
		if cc := h3(("/p/1")); !strings.HasPrefix(cc, "public, max-age=60") || strings.Contains(cc, "3600") {
			t.Errorf("HTTP/3 GET %d: Cache-Control %q, want public, max-age=600 plus the Age", i, cc)
		}
	}
	h3("/other")
	if cc := h3("/other"); cc != "public, max-age=3600" {
		t.Errorf("HTTP/3, a page no rule names: Cache-Control %q", cc)
	}
	addr := n.PublicAddr()
	rawAsk(t, addr, "GET /p/2 HTTP/1.1\r\nHost: a.test\r\nConnection: close\r\n\r\n")
	for i := range 2 {
		r, _ := rawAsk(t, addr, "HEAD /p/2 HTTP/1.1\r\nHost: a.test\r\nConnection: close\r\n\r\n")
		if cc := r.Header.Get("Cache-Control"); !strings.HasPrefix(cc, "public, max-age=60") || strings.Contains(cc, "3600") {
			t.Errorf("HTTP/1.1 HEAD hit %d: Cache-Control %q", i, cc)
		}
	}
}
