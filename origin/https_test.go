package origin

import (
	"context"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestHTTPSOrigin: an https origin is verified against origin.ca_file (and
// refused without it), a pinned server name is what the certificate is
// checked against, and the pool speaks HTTP/2 to an origin that offers it.
func TestHTTPSOrigin(t *testing.T) {
	var proto, sni string
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		proto, sni = r.Proto, r.TLS.ServerName
		_, _ = w.Write([]byte("secure"))
	}))
	srv.EnableHTTP2 = true
	srv.StartTLS()
	defer srv.Close()
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	_ = os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o600)
	get := func(cfg ClientConfig) (string, error) {
		cfg.ConnectTimeout, cfg.ResponseTimeout, cfg.MaxIdleConns, cfg.IdleConnTimeout = time.Second, time.Second, 4, time.Minute
		c, err := NewClient(cfg)
		if err != nil {
			return "", err
		}
		req, _ := http.NewRequest("GET", "/x", nil)
		resp, err := c.Fetch(context.Background(), req)
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		return resp.Proto, nil
	}
	if _, err := get(ClientConfig{URL: srv.URL}); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("an origin signed by an unknown CA was accepted: %v", err)
	}
	if p, err := get(ClientConfig{URL: srv.URL, CAFile: caFile}); err != nil || p != "HTTP/2.0" || proto != "HTTP/2.0" {
		t.Errorf("with origin.ca_file: %q %v (origin saw %q)", p, err, proto)
	}
	// httptest's certificate names example.com: pinning it verifies an
	// origin reached by IP address, and sends it as SNI.
	if _, err := get(ClientConfig{URL: srv.URL, CAFile: caFile, ServerName: "example.com"}); err != nil || sni != "example.com" {
		t.Errorf("with origin.server_name: %v, SNI %q", err, sni)
	}
	if _, err := get(ClientConfig{URL: srv.URL, CAFile: caFile, ServerName: "other.test"}); err == nil {
		t.Errorf("a pinned name the certificate does not carry was accepted")
	}
	if _, err := NewClient(ClientConfig{URL: srv.URL, CAFile: filepath.Join(t.TempDir(), "none.pem")}); err == nil || !strings.Contains(err.Error(), "origin.ca_file") {
		t.Errorf("a missing CA file: %v", err)
	}
}
