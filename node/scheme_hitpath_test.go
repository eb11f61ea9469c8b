package node

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// With cache.key_scheme on, a TLS-terminating balancer in
// forwarding.trusted_proxies reaches the edge over plain HTTP and says
// X-Forwarded-Proto: https for its https visitors. ServeHTTP keys them as
// https (Handler.scheme); the HTTP/1.1 hit path, which keys by the
// connection, must hand every such request to ServeHTTP (hitpath's
// declinedFields), or it would serve them what is stored for the
// balancer's http visitors: a force-https origin's redirect to the page
// itself, a loop.
func TestHitPathKeysATrustedProxysSchemeAsServeHTTPDoes(t *testing.T) {
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "public, max-age=600")
		if r.Header.Get("X-Forwarded-Proto") != "https" {
			http.Redirect(w, r, "https://a.test"+r.URL.RequestURI(), http.StatusMovedPermanently)
			return
		}
		_, _ = io.WriteString(w, "page "+r.URL.Path)
	}))
	t.Cleanup(origin.Close)
	n := startNodeYAML(t, "listen: '"+freeAddr(t)+"'\nadmin: {listen: '"+freeAddr(t)+"'}\n"+
		"cache: {key_scheme: true}\n"+
		"forwarding: {trusted_proxies: ['127.0.0.1/32']}\n"+
		"sites:\n  - name: a\n    hosts: [a.test]\n    origins: ['"+origin.URL+"']\n")
	if !n.cfg.Tuning.HitPath {
		t.Fatal("the hit path is off by default")
	}
	client := &http.Client{Timeout: 10 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	get := func(proto string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest("GET", "http://"+n.PublicAddr()+"/p", nil)
		req.Host = "a.test"
		req.Header.Set("X-Forwarded-Proto", proto)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, _ := get("http"); code != http.StatusMovedPermanently {
		t.Fatalf("the balancer's http visitor got %d, want the origin's 301", code)
	}
	n.Proxy().Wait()
	for i := range 3 { // the first a miss, then hits (the hit path's)
		if code, body := get("https"); code != http.StatusOK || !strings.HasPrefix(body, "page /p") {
			t.Fatalf("https visitor %d through the balancer got %d %q, want the page", i, code, body)
		}
	}
	if code, _ := get("http"); code != http.StatusMovedPermanently {
		t.Fatalf("the http visitor's stored redirect is gone: %d", code)
	}
}
