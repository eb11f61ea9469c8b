package node

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/edgecache/edge/config"
)

// TestTLSRedirect: the redirect's Location parses, keeps the TLS
// port (IPv6 literals bracketed once), and a Host with userinfo is refused.
func TestTLSRedirect(t *testing.T) {
	for _, port := range []string{"443", "8443"} {
		cfg := &config.Config{}
		cfg.TLS.RedirectToHTTPS = true
		tf := &tlsFront{cfg: cfg, port: port, proto: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "x"}, []string{"protocol"})}
		h := tf.wrapPlain(http.NotFoundHandler())
		for _, host := range []string{"example.com", "example.com:80", "[::1]", "[::1]:80", "EXAMPLE.com.", "a@evil.com"} {
			r := httptest.NewRequest("GET", "/p?q=1", nil)
			r.Host = host
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			loc := w.Header().Get("Location")
			if host == "a@evil.com" {
				if w.Code != http.StatusBadRequest || loc != "" {
					t.Errorf("port %s Host %q (userinfo): %d %q, want 400 and no Location", port, host, w.Code, loc)
				}
				continue
			}
			u, err := url.Parse(loc)
			ok := err == nil && u.Hostname() != "" && (u.Port() == "" || u.Port() == port) && u.User == nil
			if !ok {
				t.Errorf("port %s Host %q -> %d Location %q (parse err %v)", port, host, w.Code, loc, err)
			}
		}
	}
}
