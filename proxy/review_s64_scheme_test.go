package proxy

import (
	"crypto/tls"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"testing"
)

// TestS64TrustedSchemeIsForwardedAsTheEdgeReadsIt: a trusted balancer
// writes X-Forwarded-Proto: HTTPS (upper case) for a plain request.
// Handler.scheme reads it case-insensitively as https, and keys and
// judges the request so; forwardHeader keeps the trusted value as sent
// whenever it EqualFolds the edge's scheme (review s62's change), so the
// origin is told "HTTPS", not the "https" the edge keyed by. Origins
// compare that field byte for byte (Django's SECURE_PROXY_SSL_HEADER,
// Rack's allowed-scheme list): told "HTTPS" they see a plain request and
// redirect to https://. redirectsToOtherScheme compares the Location's
// scheme with the edge's "https", finds none changed, and the redirect is
// stored: the next https visitor is sent a redirect to the page itself.
//
// Expected (the commit's own invariant: "the origin is always told the
// scheme the edge keys by"): the edge writes its own canonical
// X-Forwarded-Proto (lower case, RFC 3986 §3.1) unless the trusted value
// is already exactly it.
func TestS64TrustedSchemeIsForwardedAsTheEdgeReadsIt(t *testing.T) {
	var mu sync.Mutex
	var seen []string
	h, _ := handlerProxy(t, func(w http.ResponseWriter, r *http.Request) {
		proto := r.Header.Get("X-Forwarded-Proto")
		mu.Lock()
		seen = append(seen, proto)
		mu.Unlock()
		w.Header().Set("Cache-Control", "public, max-age=600")
		if proto != "https" { // Django: META[header] == "https"
			http.Redirect(w, r, "https://example.com"+r.URL.RequestURI(), http.StatusMovedPermanently)
			return
		}
		_, _ = w.Write([]byte("the page"))
	}, func(c *Config) { c.TrustedProxies = []netip.Prefix{netip.MustParsePrefix("10.9.0.0/16")} })

	lb := httptest.NewRequest("GET", "http://example.com/p", nil)
	lb.RemoteAddr = "10.9.1.1:5555"
	lb.Header.Set("X-Forwarded-Proto", "HTTPS")
	if got := h.scheme(lb); got != "https" {
		t.Fatalf("scheme of the balancer's request: %q", got)
	}
	h.ServeHTTP(httptest.NewRecorder(), lb)
	h.Wait()

	v := httptest.NewRequest("GET", "https://example.com/p", nil)
	v.RemoteAddr = "192.0.2.7:5555"
	v.TLS = &tls.ConnectionState{}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, v)
	h.Wait()
	mu.Lock()
	told := append([]string(nil), seen...)
	mu.Unlock()
	t.Logf("origin saw X-Forwarded-Proto %q", told)
	if w.Code == http.StatusMovedPermanently && strings.HasPrefix(w.Header().Get("Location"), "https://example.com/p") {
		t.Errorf("an https visitor of https://example.com/p was sent a redirect to that page (Cache-Status %q): "+
			"the edge keyed the balancer's request as https but told the origin %q", w.Header().Get("Cache-Status"), told)
	}
}
