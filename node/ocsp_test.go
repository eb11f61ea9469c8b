package node

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/crypto/ocsp"

	"github.com/edgecache/edge/config"
)

// TestOCSPStapleForCertificateFiles runs an OCSP responder for a test CA:
// a certificate file whose leaf names it is served with a "good" staple;
// a responder that says "revoked" leaves it unstapled.
func TestOCSPStapleForCertificateFiles(t *testing.T) {
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "ocsp test CA"}, IsCA: true,
		BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	caDER, _ := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	ca, _ := x509.ParseCertificate(caDER)
	var status atomic.Int32 // ocsp.Good, or ocsp.Revoked
	var asked atomic.Int32
	responder := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		asked.Add(1)
		body, _ := io.ReadAll(r.Body)
		req, err := ocsp.ParseRequest(body)
		if err != nil {
			http.Error(w, err.Error(), 400)
			return
		}
		tmpl := ocsp.Response{Status: int(status.Load()), SerialNumber: req.SerialNumber, ThisUpdate: time.Now().Add(-time.Minute),
			NextUpdate: time.Now().Add(time.Hour), RevokedAt: time.Now().Add(-time.Minute)}
		raw, err := ocsp.CreateResponse(ca, ca, tmpl, caKey)
		if err != nil {
			http.Error(w, err.Error(), 500)
			return
		}
		w.Header().Set("Content-Type", "application/ocsp-response")
		_, _ = w.Write(raw)
	}))
	defer responder.Close()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	leafTmpl := &x509.Certificate{SerialNumber: big.NewInt(99), Subject: pkix.Name{CommonName: "a.test"}, DNSNames: []string{"a.test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), OCSPServer: []string{responder.URL}}
	leafDER, _ := x509.CreateCertificate(rand.Reader, leafTmpl, ca, &key.PublicKey, caKey)
	dir := t.TempDir()
	keyDER, _ := x509.MarshalECPrivateKey(key)
	chain := append(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: leafDER}), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})...)
	certPath, keyPath := filepath.Join(dir, "a.crt"), filepath.Join(dir, "a.key")
	_ = os.WriteFile(certPath, chain, 0o600)
	_ = os.WriteFile(keyPath, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600)

	cfg := &config.Config{}
	cfg.TLS.CertFile, cfg.TLS.KeyFile = certPath, keyPath
	fc, err := newFileCerts(cfg, slog.New(slog.DiscardHandler), func() *certMetrics { return newCertMetrics(prometheus.NewRegistry()) })
	if err != nil {
		t.Fatal(err)
	}
	status.Store(int32(ocsp.Revoked))
	if n := fc.staple(context.Background(), http.DefaultClient); n != 0 || len(fc.set.Load().match("a.test").OCSPStaple) != 0 {
		t.Fatalf("a revoked answer was stapled")
	}
	status.Store(int32(ocsp.Good))
	if n := fc.staple(context.Background(), http.DefaultClient); n != 1 {
		t.Fatalf("stapled %d certificates, want 1", n)
	}
	if n := fc.staple(context.Background(), http.DefaultClient); n != 0 {
		t.Errorf("a fresh staple was fetched again")
	}
	// A client sees the staple in the handshake.
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	srv := tls.Server(a, &tls.Config{GetCertificate: func(h *tls.ClientHelloInfo) (*tls.Certificate, error) { return fc.set.Load().match(h.ServerName), nil }})
	go func() { _ = srv.Handshake() }()
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	cli := tls.Client(b, &tls.Config{ServerName: "a.test", RootCAs: pool})
	if err := cli.Handshake(); err != nil {
		t.Fatal(err)
	}
	r, err := ocsp.ParseResponseForCert(cli.ConnectionState().OCSPResponse, cli.ConnectionState().PeerCertificates[0], ca)
	if err != nil || r.Status != ocsp.Good {
		t.Fatalf("the handshake's staple: %v %v", r, err)
	}
	if asked.Load() != 2 {
		t.Errorf("the responder was asked %d times, want 2", asked.Load())
	}
}
