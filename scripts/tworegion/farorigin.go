package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"
)

// farOrigin is the continents' origin: the demo origin over https, with a
// certificate made for the run, behind a relay that adds half the origin's
// latency each way. Every round trip to it then costs that latency (a new
// connection's TLS handshake one more, as a distant origin's does),
// where the today setting's origin adds a pause to each response of a
// plain-HTTP origin next door.
type farOrigin struct {
	dir, cert, key string
	client         *http.Client // trusts the certificate: the origin's /_stats, asked directly
}

// newFarOrigin writes a self-signed certificate for 127.0.0.1 and its key
// into a new temporary directory.
func newFarOrigin() (*farOrigin, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "tworegion origin"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, IsCA: true, BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("far origin certificate: %w", err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "tworegion-origin-")
	if err != nil {
		return nil, err
	}
	o := &farOrigin{dir: dir, cert: filepath.Join(dir, "origin.crt"), key: filepath.Join(dir, "origin.key")}
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	if err := os.WriteFile(o.cert, certPEM, 0o600); err != nil {
		return nil, err
	}
	if err := os.WriteFile(o.key, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(certPEM)
	o.client = &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}
	return o, nil
}

// Close removes the certificate's directory.
func (o *farOrigin) Close() { _ = os.RemoveAll(o.dir) }
