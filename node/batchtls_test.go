package node

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"net"
	"slices"
	"sync"
	"testing"
	"time"
)

// recordingConn remembers the size of every Write.
type recordingConn struct {
	net.Conn
	mu    sync.Mutex
	sizes []int
}

func (c *recordingConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	c.sizes = append(c.sizes, len(p))
	c.mu.Unlock()
	return c.Conn.Write(p)
}

func selfSigned(t *testing.T) tls.Certificate {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "t"}, DNSNames: []string{"t"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, _ := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// TestTLSFullRecordSizes checks tlsFullRecords against crypto/tls: the
// record that carries a full 4 KiB net/http buffer has one of those sizes
// in TLS 1.3 and in TLS 1.2 with AES-GCM and ChaCha20-Poly1305, so the
// batching under TLS recognises it.
func TestTLSFullRecordSizes(t *testing.T) {
	cert := selfSigned(t)
	for _, tc := range []struct {
		name   string
		max    uint16
		suites []uint16
	}{
		{"TLS 1.3", tls.VersionTLS13, nil},
		{"TLS 1.2 AES-GCM", tls.VersionTLS12, []uint16{tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256}},
		{"TLS 1.2 ChaCha20", tls.VersionTLS12, []uint16{tls.TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256}},
	} {
		a, b := net.Pipe()
		rec := &recordingConn{Conn: a}
		srv := tls.Server(rec, &tls.Config{Certificates: []tls.Certificate{cert}, MaxVersion: tc.max, CipherSuites: tc.suites, DynamicRecordSizingDisabled: true})
		cli := tls.Client(b, &tls.Config{InsecureSkipVerify: true, MaxVersion: tc.max, CipherSuites: tc.suites}) // a test's own self-signed peer
		done := make(chan error, 1)
		go func() {
			buf := make([]byte, netHTTPBufferSize)
			_, err := cli.Read(buf[:1])
			if err == nil {
				_, err = readFull(cli, buf[:netHTTPBufferSize-1])
			}
			done <- err
		}()
		if err := srv.Handshake(); err != nil {
			t.Fatal(err)
		}
		rec.mu.Lock()
		rec.sizes = nil
		rec.mu.Unlock()
		if _, err := srv.Write(make([]byte, netHTTPBufferSize)); err != nil {
			t.Fatal(err)
		}
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		rec.mu.Lock()
		sizes := rec.sizes
		rec.mu.Unlock()
		if !slices.ContainsFunc(sizes, func(n int) bool { return slices.Contains(tlsFullRecords, n) }) {
			t.Errorf("%s: record writes %v, none in %v", tc.name, sizes, tlsFullRecords)
		}
		a.Close()
		b.Close()
	}
}

func readFull(c net.Conn, p []byte) (int, error) {
	n := 0
	for n < len(p) {
		m, err := c.Read(p[n:])
		n += m
		if err != nil {
			return n, err
		}
	}
	return n, nil
}
