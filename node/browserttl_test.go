package node

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestBrowserTTLOnEveryFront: a rule's browser_ttl reaches clients of
// every front, the hit paths included (they leave such answers to
// ServeHTTP, whose writer rewrites the field): HTTP/1.1 and HTTP/2 over
// TLS get max-age=600 on the miss and on the hits, while a page no such
// rule names is still answered by the hit path with the origin's field.
func TestBrowserTTLOnEveryFront(t *testing.T) {
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "public, max-age=3600")
		_, _ = w.Write([]byte("page " + r.URL.Path))
	}))
	defer origin.Close()
	cp, kp := writePair(t, t.TempDir(), "a", []string{"a.test"}, 1)
	n := startNodeYAML(t, "listen: '"+freeAddr(t)+"'\nadmin: {listen: '"+freeAddr(t)+"'}\n"+
		"tls: {listen: '"+freeAddr(t)+"', cert_file: '"+cp+"', key_file: '"+kp+"'}\n"+
		"tuning: {hit_path: true, http2_server: edge}\n"+
		"sites:\n  - name: a\n    hosts: [a.test]\n    origins: ['"+origin.URL+"']\n"+
		"    rules:\n"+
		"      - {name: pages, match: {path: /p/}, browser_ttl: 10m}\n")
	addr := n.PublicAddr()
	get := func(path string) (string, string) {
		r, _ := rawAsk(t, addr, "GET "+path+" HTTP/1.1\r\nHost: a.test\r\nConnection: close\r\n\r\n")
		return r.Header.Get("Cache-Control"), r.Header.Get("Cache-Status")
	}
	for i := range 3 {
		if cc, cs := get("/p/1"); !strings.HasPrefix(cc, "public, max-age=60") || strings.Contains(cc, "3600") {
			t.Errorf("HTTP/1.1 GET %d: Cache-Control %q (Cache-Status %q), want public, max-age=600 plus the Age", i, cc, cs)
		}
	}
	c := rvH2Dial(t, n.tls.ln.Addr().String())
	if got := c.ask(1, ":method", "GET", ":scheme", "https", ":authority", "a.test", ":path", "/p/1"); !strings.Contains(got, "cache-control=public, max-age=60") {
		t.Errorf("h2 hit: %s, want cache-control public, max-age=600 plus the Age", got)
	}
	// Not named by the rule: the hit path's, with the origin's field.
	get("/other")
	before := n.hitM.Stats().Answered
	if cc, _ := get("/other"); cc != "public, max-age=3600" {
		t.Errorf("a page no browser_ttl names: Cache-Control %q", cc)
	}
	if n.hitM.Stats().Answered == before {
		t.Error("a page no browser_ttl names was not answered by the hit path")
	}
}
