package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// admTLSEdge starts a real node with admin.tls from ca's leaf serial 10
// and returns the config file, the admin address and the cert/key paths.
func admTLSEdge(t *testing.T, ca *testCA, dir string) (file, adm, certPath, keyPath string) {
	t.Helper()
	certPath, keyPath, _ = ca.leaf(t, dir, "admin", 10, time.Now().Add(-time.Hour), time.Now().Add(24*time.Hour), "admin.example")
	origin, pub := freeAddr(t), freeAddr(t)
	adm = freeAddr(t)
	startOrigin(t, origin, "1ms")
	file = filepath.Join(dir, "edge.yaml")
	yaml := "origin:\n  url: http://" + origin + "\nlisten: \"" + pub + "\"\nadmin:\n  listen: \"" + adm + "\"\n  token: tok\n  tls:\n    cert_file: " + certPath + "\n    key_file: " + keyPath + "\n"
	if err := os.WriteFile(file, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	startEdge(t, "serve", "-c", file)
	waitFor(t, "the admin listener over HTTPS", 20*time.Second, func() bool { return peerSerial(t, adm, "admin.example", ca.pool) == 10 })
	return file, adm, certPath, keyPath
}

// TestHealthAfterARotationToACertificateNotValidYet: the
// certificate is rotated to a pair whose NotBefore is a few seconds ahead.
// The node refuses it while it is not yet valid and never looks at the
// files again (their stamps are recorded as seen), so it keeps serving the
// old certificate; `edge health -c` pins the file's new certificate and
// fails from then on, though the node is ready and the files on disk are
// good. A container HEALTHCHECK or startup probe then kills a healthy node.
func TestHealthAfterARotationToACertificateNotValidYet(t *testing.T) {
	t.Parallel() // mostly waiting for polls
	if testing.Short() {
		t.Skip("starts processes")
	}
	dir := t.TempDir()
	ca := newTestCA(t)
	file, adm, _, _ := admTLSEdge(t, ca, dir)
	if out, err := runCmd(healthCmd(), "-c", file); err != nil {
		t.Fatalf("edge health before the rotation: %q %v", out, err)
	}
	ca.leaf(t, dir, "admin", 11, time.Now().Add(5*time.Second), time.Now().Add(48*time.Hour), "admin.example")
	time.Sleep(5*time.Second + 6*time.Second) // valid for three polls (fileCertPoll 2s)
	if out, err := runCmd(healthCmd(), "-c", file, "--timeout", "2s"); err != nil {
		t.Errorf("edge health with a valid certificate on disk and a ready node: %q %v (the node serves serial %d)", out, err, peerSerial(t, adm, "admin.example", ca.pool))
	}
}

// TestHealthAsTheImageRunsIt: the Dockerfile's HEALTHCHECK
// runs `edge health` with no --config, while the node runs with
// `--config /etc/edge/config.yaml`, the file operations.md says to mount
// over for a configuration of one's own. With admin.tls set in that file
// (not in the environment), the health check speaks plain HTTP to the
// HTTPS-only listener and fails for a ready node. Here EDGE_ADMIN_LISTEN
// stands for the image's matching default address (0.0.0.0:9180 in the
// file, 127.0.0.1:9180 in the command).
func TestHealthAsTheImageRunsIt(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	dir := t.TempDir()
	ca := newTestCA(t)
	file, adm, _, _ := admTLSEdge(t, ca, dir)
	t.Setenv("EDGE_ADMIN_LISTEN", adm)
	// The HEALTHCHECK's own arguments, the image's config path standing
	// for this test's file.
	df, err := os.ReadFile("../../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`HEALTHCHECK .*CMD \[(.*)\]`).FindSubmatch(df)
	if m == nil {
		t.Fatal("no HEALTHCHECK in the Dockerfile")
	}
	var args []string
	for _, a := range strings.Split(string(m[1]), ",") {
		a = strings.Trim(strings.TrimSpace(a), `"`)
		if a == "/etc/edge/config.yaml" {
			a = file
		}
		args = append(args, a)
	}
	if len(args) < 2 || args[1] != "health" {
		t.Fatalf("the HEALTHCHECK runs %q", args)
	}
	if out, err := runCmd(healthCmd(), append(args[2:], "--timeout", "2s")...); err != nil {
		t.Errorf("edge health as the image's HEALTHCHECK runs it (%q), admin.tls in the mounted config: %q %v", args, out, err)
	}
}

// TestHealthPinsTheConfiguredCertificate: what the pin must refuse and accept.
func TestHealthPinsTheConfiguredCertificate(t *testing.T) {
	t.Parallel() // mostly waiting for polls
	if testing.Short() {
		t.Skip("starts processes")
	}
	dir := t.TempDir()
	ca := newTestCA(t)
	file, adm, certPath, keyPath := admTLSEdge(t, ca, dir)

	// A fake admin listener presenting the CA certificate (which is in the
	// configured cert file, after the leaf), then one presenting another
	// leaf with the real leaf behind it in the chain.
	certPEM, _ := os.ReadFile(certPath)
	var ders [][]byte
	for rest := certPEM; ; {
		var b *pem.Block
		if b, rest = pem.Decode(rest); b == nil {
			break
		}
		ders = append(ders, b.Bytes)
	}
	otherKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(99), Subject: pkix.Name{CommonName: "admin.example"}, DNSNames: []string{"admin.example"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	otherDER, _ := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &otherKey.PublicKey, ca.key)
	for name, c := range map[string]tls.Certificate{
		"the CA certificate":               {Certificate: [][]byte{ca.cert.Raw}, PrivateKey: ca.key},
		"another leaf, the real one after": {Certificate: [][]byte{otherDER, ders[0], ca.cert.Raw}, PrivateKey: otherKey},
	} {
		ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{c}})
		if err != nil {
			t.Fatal(err)
		}
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get("Authorization") != "" {
				t.Errorf("%s: the token reached the fake listener", name)
			}
			_, _ = w.Write([]byte(`{"result":"ok","hash":"x"}`))
		})}
		go srv.Serve(ln)
		if _, err := runCmd(healthCmd(), "-c", file, "--admin", ln.Addr().String(), "--timeout", "2s"); err == nil {
			t.Errorf("edge health accepted %s", name)
		}
		if _, err := runCmd(reloadCmd(), "-c", file, "--admin", ln.Addr().String()); err == nil {
			t.Errorf("edge reload accepted %s", name)
		}
		srv.Close()
	}

	// A cert file with a key block first (a combined PEM, also the key
	// file): the node and the pin agree on the leaf.
	keyPEM, _ := os.ReadFile(keyPath)
	combined := filepath.Join(dir, "combined.pem")
	writeAtomically(t, combined, append(append([]byte{}, keyPEM...), certPEM...))
	writeAtomically(t, certPath, append(append([]byte{}, keyPEM...), certPEM...))
	time.Sleep(5 * time.Second)
	if out, err := runCmd(healthCmd(), "-c", file, "--timeout", "2s"); err != nil || !strings.Contains(out, "ready") {
		t.Errorf("a cert file with the key block first: %q %v", out, err)
	}
	_ = adm
}
