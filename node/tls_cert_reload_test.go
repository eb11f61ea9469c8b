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
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/edgecache/edge/config"
)

func writePair(t *testing.T, dir, name string, names []string, serial int64) (string, string) {
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: names[0]}, DNSNames: names,
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, _ := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	kd, _ := x509.MarshalECPrivateKey(key)
	cp, kp := filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key")
	_ = os.WriteFile(cp+".tmp", pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600)
	_ = os.WriteFile(kp+".tmp", pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kd}), 0o600)
	_ = os.Rename(kp+".tmp", kp)
	_ = os.Rename(cp+".tmp", cp)
	return cp, kp
}

func TestTLSCertReloadUnderHandshakes(t *testing.T) {
	dir := t.TempDir()
	cp, kp := writePair(t, dir, "a", []string{"a.test", "*.w.test"}, 1)
	cp2, kp2 := writePair(t, dir, "b", []string{"B.test"}, 2)
	cfg := &config.Config{}
	cfg.TLS.CertFile, cfg.TLS.KeyFile = cp, kp
	cfg.TLS.Certificates = []config.CertPair{{CertFile: cp2, KeyFile: kp2}}
	fc, err := newFileCerts(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), func() *certMetrics { return newCertMetrics(prometheus.NewRegistry()) })
	if err != nil {
		t.Fatal(err)
	}
	tf := &tlsFront{files: fc}
	for _, sni := range []string{"A.TEST", "b.test", "x.w.test", "w.test", "", "127.0.0.1", "y.x.w.test"} {
		c, err := tf.certificate(&tls.ClientHelloInfo{ServerName: sni})
		if err != nil {
			t.Errorf("%q: %v", sni, err)
			continue
		}
		t.Logf("SNI %q -> %v", sni, c.Leaf.DNSNames)
	}
	ctx, cancel := context.WithCancel(context.Background())
	go fc.watch(ctx, 5*time.Millisecond)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				c, err := tf.certificate(&tls.ClientHelloInfo{ServerName: "a.test"})
				if err != nil || c == nil {
					t.Error("no cert", err)
					return
				}
				_ = tf.certificates()
			}
		}()
	}
	for i := 0; i < 30; i++ {
		writePair(t, dir, "a", []string{"a.test"}, int64(10+i))
		if i%7 == 0 {
			_ = os.WriteFile(kp, []byte("garbage"), 0o600) // half-written
		}
		time.Sleep(7 * time.Millisecond)
	}
	close(stop)
	wg.Wait()
	cancel()
	// a key that does not match: error names the key
	_, kx := writePair(t, dir, "x", []string{"x.test"}, 99)
	cfg2 := &config.Config{}
	cfg2.TLS.Certificates = []config.CertPair{{CertFile: cp2, KeyFile: kp2}, {CertFile: cp, KeyFile: kx}}
	_, err = newFileCerts(cfg2, slog.Default(), func() *certMetrics { return newCertMetrics(prometheus.NewRegistry()) })
	if err == nil || !strings.Contains(err.Error(), "tls.certificates[1]") {
		t.Errorf("mismatched key: %v", err)
	}
}
