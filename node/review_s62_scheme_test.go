package node

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

// TestS62TrustedProxyOverTLSForwardsOneSchemeAndKeysAnother: a balancer
// listed in forwarding.trusted_proxies that reaches the edge over TLS
// (HTTP/2 here) relays a plain-http visitor's request with
// X-Forwarded-Proto: http, as such balancers do. The edge forwards that
// field to the origin as the trusted party sent it (forwardHeader keeps
// it), but keys and judges the request as https (Handler.scheme believes
// the connection's TLS first). The origin, told "http", answers with its
// redirect to the https page; redirectsToOtherScheme compares the
// Location's scheme with the edge's "https", sees no scheme change, and
// the redirect is stored. Every https visitor after that is sent a
// redirect to the page they asked for: a loop, from one plain-http
// visit through the balancer.
func TestS62TrustedProxyOverTLSForwardsOneSchemeAndKeysAnother(t *testing.T) {
	var mu sync.Mutex
	var seen []string
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		proto := r.Header.Get("X-Forwarded-Proto")
		mu.Lock()
		seen = append(seen, r.URL.Path+" proto="+proto)
		mu.Unlock()
		w.Header().Set("Cache-Control", "public, max-age=600")
		if proto != "https" {
			// Rails' force_ssl, Django's SECURE_SSL_REDIRECT.
			http.Redirect(w, r, "https://a.test"+r.URL.RequestURI(), http.StatusMovedPermanently)
			return
		}
		fmt.Fprintf(w, "page %s", r.URL.Path)
	}))
	t.Cleanup(origin.Close)
	for _, server := range []string{"edge", "go"} {
		t.Run(server, func(t *testing.T) {
			cp, kp := writePair(t, t.TempDir(), "a", []string{"a.test"}, 1)
			n := startNodeYAML(t, "listen: '"+freeAddr(t)+"'\nadmin: {listen: '"+freeAddr(t)+"'}\n"+
				"tls: {listen: '"+freeAddr(t)+"', cert_file: '"+cp+"', key_file: '"+kp+"'}\n"+
				"tuning: {hit_path: true, http2_server: "+server+"}\n"+
				"forwarding: {trusted_proxies: ['127.0.0.1/32']}\n"+
				"sites:\n  - name: a\n    hosts: [a.test]\n    origins: ['"+origin.URL+"']\n")
			path := "/s62-" + server
			base := []string{":method", "GET", ":scheme", "https", ":authority", "a.test", ":path", path}
			c := rvH2Dial(t, n.tls.ln.Addr().String())
			// The balancer relays a plain-http visitor.
			lb := c.ask(1, append(base, "x-forwarded-proto", "http")...)
			t.Logf("balancer (x-forwarded-proto: http): %s", lb)
			n.Proxy().Wait()
			// An https visitor, straight to the edge over TLS.
			got := c.ask(3, base...)
			t.Logf("https visitor: %s", got)
			mu.Lock()
			t.Logf("origin saw: %v", seen)
			mu.Unlock()
			if strings.HasPrefix(got, "301 ") && strings.Contains(got, "location=https://a.test"+path+" ") {
				t.Errorf("an https visitor of https://a.test%s was sent the redirect to that very page (%s): "+
					"the origin was told X-Forwarded-Proto: http while the edge keyed and judged the request as https", path, got)
			}
		})
	}
}
