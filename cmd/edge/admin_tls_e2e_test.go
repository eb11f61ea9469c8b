package main

import (
	"crypto/tls"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestAdminListenerOverTLS: with admin.tls, the admin listener of a real
// node serves HTTPS only (a plain request is refused), its certificate is
// re-read when the files change, its expiry is exported, and `edge health`
// and `edge reload` reach it over HTTPS, accepting exactly the configured
// certificate.
func TestAdminListenerOverTLS(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	dir := t.TempDir()
	ca := newTestCA(t)
	certPath, keyPath, _ := ca.leaf(t, dir, "admin", 10, time.Now().Add(-time.Hour), time.Now().Add(24*time.Hour), "admin.example")
	origin, pub, adm := freeAddr(t), freeAddr(t), freeAddr(t)
	startOrigin(t, origin, "1ms")
	file := filepath.Join(dir, "edge.yaml")
	yaml := "origin:\n  url: http://" + origin + "\nlisten: \"" + pub + "\"\nadmin:\n  listen: \"" + adm + "\"\n  token: tok\n  tls:\n    cert_file: " + certPath + "\n    key_file: " + keyPath + "\n"
	if err := os.WriteFile(file, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	startEdge(t, "serve", "-c", file)
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.pool, ServerName: "admin.example"}}}
	waitFor(t, "the admin listener over HTTPS", 20*time.Second, func() bool {
		resp, err := client.Get("https://" + adm + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	})

	// Plain HTTP gets no admin answer.
	if resp, err := http.Get("http://" + adm + "/metrics"); err == nil {
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == 200 || strings.Contains(string(body), "edge_") {
			t.Errorf("plain HTTP to the TLS admin listener: %d %q", resp.StatusCode, body)
		}
	}
	resp, err := client.Get("https://" + adm + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), `edge_tls_certificate_expiry_timestamp_seconds{file="`+certPath+`"}`) {
		t.Error("the admin certificate's expiry is not exported")
	}

	resp, err = client.Get("https://" + adm + "/status.json")
	if err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), `"admin_tls":{"source":"`+certPath+`"`) {
		t.Errorf("status.json does not show the admin certificate: %.300s", body)
	}

	if out, err := runCmd(healthCmd(), "-c", file); err != nil || !strings.Contains(out, "ready") {
		t.Fatalf("edge health over TLS: %q %v", out, err)
	}
	if out, err := runCmd(reloadCmd(), "-c", file); err != nil || !strings.Contains(out, "reloaded") {
		t.Fatalf("edge reload over TLS: %q %v", out, err)
	}
	// Another certificate pinned: refused.
	otherCert, _, _ := ca.leaf(t, t.TempDir(), "other", 11, time.Now().Add(-time.Hour), time.Now().Add(24*time.Hour), "admin.example")
	t.Setenv("EDGE_ADMIN_TLS_CERT_FILE", otherCert)
	if _, err := runCmd(healthCmd(), "--admin", adm, "--timeout", "2s"); err == nil {
		t.Error("edge health accepted a certificate other than the one it was given")
	}

	// The files change: the listener serves the new certificate.
	ca.leaf(t, dir, "admin", 12, time.Now().Add(-time.Hour), time.Now().Add(48*time.Hour), "admin.example")
	waitFor(t, "the admin listener to serve the new certificate", 20*time.Second, func() bool {
		conn, err := tls.Dial("tcp", adm, &tls.Config{RootCAs: ca.pool, ServerName: "admin.example"})
		if err != nil {
			return false
		}
		defer conn.Close()
		return conn.ConnectionState().PeerCertificates[0].SerialNumber.Int64() == 12
	})
}
