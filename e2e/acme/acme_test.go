// Package acme holds the end-to-end test of automatic certificates: two
// edge nodes sharing ACME storage against pebble, Let's Encrypt's test CA.
// It runs real edge processes (internal/e2e) in its own test binary, beside
// cmd/edge's, so that neither nears go test's time limit.
package acme

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/edgecache/edge/internal/e2e"
)

func TestMain(m *testing.M) { e2e.Main(m) }

var (
	freeAddr   = e2e.FreeAddr
	waitUp     = e2e.WaitUp
	metric     = e2e.Metric
	waitFor    = e2e.WaitFor
	portOfAddr = e2e.PortOf
)

func startEdge(t *testing.T, args ...string) *exec.Cmd {
	t.Helper()
	return e2e.Start(t, e2e.Edge(t), args...)
}

func startOrigin(t *testing.T, addr, latency string) { e2e.StartOrigin(t, e2e.Edge(t), addr, latency) }

// pebbleCA runs Let's Encrypt's test CA (github.com/letsencrypt/pebble, a
// tool dependency in go.mod) with its mock DNS server answering 127.0.0.1
// for every name, and validating challenges against the given ports.
type pebbleCA struct {
	dir, mgmt string
	caRoot    string // signs pebble's own HTTPS listener
}

func startPebble(t *testing.T, httpPort, tlsPort string, validitySeconds int) *pebbleCA {
	t.Helper()
	// Built before its directory is asked for: on a fresh module cache
	// `go list -m` names no directory until the module is downloaded, and
	// pebble would then look for its certificates relative to ours.
	bin := t.TempDir()
	build := exec.Command("go", "build", "-o", bin, "github.com/letsencrypt/pebble/v2/cmd/pebble", "github.com/letsencrypt/pebble/v2/cmd/pebble-challtestsrv")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building pebble: %v: %s", err, out)
	}
	mod, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/letsencrypt/pebble/v2").Output()
	modDir := strings.TrimSpace(string(mod))
	if err != nil || modDir == "" {
		t.Fatalf("pebble's module directory: %q, %v", modDir, err)
	}
	dns := freeAddr(t)
	e2e.Start(t, filepath.Join(bin, "pebble-challtestsrv"), "-dnsserver", dns, "-http01", "", "-https01", "", "-tlsalpn01", "",
		"-doh", "", "-management", freeAddr(t), "-defaultIPv4", "127.0.0.1", "-defaultIPv6", "")
	p := &pebbleCA{dir: freeAddr(t), mgmt: freeAddr(t), caRoot: filepath.Join(modDir, "test/certs/pebble.minica.pem")}
	conf := fmt.Sprintf(`{"pebble": {"listenAddress": %q, "managementListenAddress": %q,
  "certificate": %q, "privateKey": %q, "httpPort": %s, "tlsPort": %s, "ocspResponderURL": "",
  "externalAccountBindingRequired": false, "keyAlgorithm": "ecdsa",
  "profiles": {"default": {"description": "short-lived, to force renewal", "validityPeriod": %d}}}}`,
		p.dir, p.mgmt, filepath.Join(modDir, "test/certs/localhost/cert.pem"), filepath.Join(modDir, "test/certs/localhost/key.pem"),
		httpPort, tlsPort, validitySeconds)
	file := filepath.Join(t.TempDir(), "pebble.json")
	if err := os.WriteFile(file, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(filepath.Join(bin, "pebble"), "-config", file, "-dnsserver", dns)
	cmd.Env = append(os.Environ(), "PEBBLE_VA_NOSLEEP=1", "PEBBLE_WFE_NONCEREJECT=0", "PEBBLE_AUTHZREUSE=0")
	cmd.Stderr = &e2e.LogWriter{T: t, Prefix: "pebble"}
	cmd.Stdout = cmd.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	waitFor(t, "pebble", 20*time.Second, func() bool {
		c, err := net.Dial("tcp", p.dir)
		if err == nil {
			c.Close()
		}
		return err == nil
	})
	return p
}

// issuingRoots fetches the roots pebble signs certificates with (made at
// its start).
func (p *pebbleCA) issuingRoots(t *testing.T) *x509.CertPool {
	t.Helper()
	c := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} // the management API of a local test CA
	resp, err := c.Get("https://" + p.mgmt + "/roots/0")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	pem, _ := io.ReadAll(resp.Body)
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		t.Fatalf("pebble roots: %s", pem)
	}
	return pool
}

// servedCert returns the certificate a node's TLS listener presents for
// name, if it verifies against roots.
// waitingRelay listens on a free address and forwards each connection to
// target, waiting up to 30 s for target to listen, and returns its
// address.
func waitingRelay(t *testing.T, target string) string {
	t.Helper()
	ln, err := net.Listen("tcp", freeAddr(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				var up net.Conn
				for deadline := time.Now().Add(30 * time.Second); up == nil && time.Now().Before(deadline); {
					if up, err = net.DialTimeout("tcp", target, time.Second); err != nil {
						up = nil
						time.Sleep(50 * time.Millisecond)
					}
				}
				if up == nil {
					return
				}
				defer up.Close()
				go func() { _, _ = io.Copy(up, c); _ = up.(*net.TCPConn).CloseWrite() }()
				_, _ = io.Copy(c, up)
			}()
		}
	}()
	return ln.Addr().String()
}

func servedCert(addr, name string, roots *x509.CertPool) (*x509.Certificate, error) {
	d := &net.Dialer{Timeout: 2 * time.Second}
	c, err := tls.DialWithDialer(d, "tcp", addr, &tls.Config{ServerName: name, RootCAs: roots})
	if err != nil {
		return nil, err
	}
	defer c.Close()
	return c.ConnectionState().PeerCertificates[0], nil
}

// TestACMEWithPebble runs two edge nodes that share ACME storage against
// pebble. Pebble validates every challenge against node B, whichever node
// asked for the certificate: B answers from the shared storage. Both then
// serve the certificate over HTTPS, and a 30-second certificate is renewed
// without a restart.
func TestACMEWithPebble(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and starts pebble and two nodes")
	}
	origin := freeAddr(t)
	startOrigin(t, origin, "0s")
	type node struct{ pub, tls, adm string }
	a := node{freeAddr(t), freeAddr(t), freeAddr(t)}
	b := node{freeAddr(t), freeAddr(t), freeAddr(t)}
	// Pebble checks the challenges at B through relays that are up before
	// either node and wait for B to listen: node A asks for the
	// certificate as soon as it starts, and a check that found B not
	// listening yet cost certmagic's 60 s retry (the test took 133 s).
	pb := startPebble(t, portOfAddr(waitingRelay(t, b.pub)), portOfAddr(waitingRelay(t, b.tls)), 30)
	storage := t.TempDir()
	for i, n := range []node{a, b} {
		conf := fmt.Sprintf(`origin:
  url: "http://%s"
listen: "%s"
admin:
  listen: "%s"
node_id: "edge-acme-%d"
log:
  level: "info"
tls:
  listen: "%s"
  acme.domains: "edge.test"
  acme.email: "ops@edge.test"
  acme.ca: "https://%s/dir"
  acme.ca_root: "%s"
  acme.storage: "%s"
  acme.renew_check_interval: "1s"
`, origin, n.pub, n.adm, i, n.tls, pb.dir, pb.caRoot, storage)
		file := filepath.Join(t.TempDir(), "edge.yaml")
		if err := os.WriteFile(file, []byte(conf), 0o600); err != nil {
			t.Fatal(err)
		}
		startEdge(t, "serve", "-c", file)
		waitUp(t, "http://"+n.adm+"/readyz")
	}
	roots := pb.issuingRoots(t)
	var first *x509.Certificate
	// The bound leaves room for certmagic's 60 s retry, should a check
	// still fail (it stops a stuck test; it is not a timing assertion).
	waitFor(t, "both nodes to serve a certificate from pebble", 180*time.Second, func() bool {
		ca, errA := servedCert(a.tls, "edge.test", roots)
		cb, errB := servedCert(b.tls, "edge.test", roots)
		if errA != nil || errB != nil {
			return false
		}
		first = ca
		return ca.SerialNumber.Cmp(cb.SerialNumber) == 0 // one certificate, obtained once, shared through storage
	})
	if first.NotAfter.Sub(first.NotBefore) > time.Minute {
		t.Fatalf("certificate lifetime %s, want pebble's 30 s profile", first.NotAfter.Sub(first.NotBefore))
	}
	// A request over HTTPS with the obtained certificate.
	c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: roots}, ForceAttemptHTTP2: true,
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, network, a.tls)
		}}}
	resp, err := c.Get("https://edge.test/p/3")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.ProtoMajor != 2 {
		t.Errorf("HTTPS with the ACME certificate: %d %s", resp.StatusCode, resp.Proto)
	}
	// The short-lived certificate is renewed in its last third, without a restart.
	waitFor(t, "the certificate to be renewed", 60*time.Second, func() bool {
		cur, err := servedCert(a.tls, "edge.test", roots)
		return err == nil && cur.SerialNumber.Cmp(first.SerialNumber) != 0
	})
	obtained := metric(t, a.adm, `edge_acme_events_total{event="cert_obtained"}`) + metric(t, b.adm, `edge_acme_events_total{event="cert_obtained"}`)
	// certmagic reports a renewal as cert_obtained too: at least two.
	if obtained < 2 {
		t.Errorf("edge_acme_events_total{cert_obtained} = %v over both nodes, want ≥ 2 (issue and renewal)", obtained)
	}
}
