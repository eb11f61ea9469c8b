package node

import (
	"bufio"
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"log"
	"log/slog"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/edgecache/edge/config"
)

// reviewPair writes a self-signed pair for admin.example/127.0.0.1 valid
// from notBefore to notAfter, replacing name.crt and name.key by renames
// (key first, as writePair does).
func reviewPair(t *testing.T, dir, name string, serial int64, notBefore, notAfter time.Time) (string, string) {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: "admin.example"},
		DNSNames: []string{"admin.example"}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		NotBefore: notBefore, NotAfter: notAfter}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kd, _ := x509.MarshalECPrivateKey(key)
	cp, kp := filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key")
	for _, f := range []struct {
		path string
		data []byte
	}{{kp, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kd})}, {cp, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}} {
		if err := os.WriteFile(f.path+".tmp", f.data, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(f.path+".tmp", f.path); err != nil {
			t.Fatal(err)
		}
	}
	return cp, kp
}

func adminSerial(addr string) int64 {
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 2 * time.Second}, "tcp", addr, &tls.Config{InsecureSkipVerify: true})
	if err != nil {
		return -1
	}
	defer c.Close()
	return c.ConnectionState().PeerCertificates[0].SerialNumber.Int64()
}

func adminTLSNode(t *testing.T, extra string) (*Node, string) {
	t.Helper()
	dir := t.TempDir()
	cp, kp := reviewPair(t, dir, "admin", 1, time.Now().Add(-time.Hour), time.Now().Add(24*time.Hour))
	pub, adm := twoFreePorts(t)
	n := startNodeYAML(t, "origin: {url: 'http://127.0.0.1:1'}\nlisten: '"+pub+"'\nadmin: {listen: '"+adm+"', token: tok, tls: {cert_file: '"+cp+"', key_file: '"+kp+"'}}\n"+extra)
	deadline := time.Now().Add(10 * time.Second)
	for adminSerial(n.AdminAddr()) != 1 {
		if time.Now().After(deadline) {
			t.Fatal("the admin listener does not serve TLS")
		}
		time.Sleep(50 * time.Millisecond)
	}
	return n, dir
}

// TestACertificateNotValidYetIsLoadedWhenItIs: a rotation
// writes a pair whose NotBefore is a few seconds ahead (an issuer with
// NotBefore = now and a little clock skew, or a pair staged ahead of
// time). The watcher refuses it (right) but records the files' stamps, so
// once the certificate becomes valid it is never loaded: the listener
// serves the old certificate until it expires, though the files on disk
// are good. (The fileCerts comment promises a change that does not load
// "is retried".)
func TestACertificateNotValidYetIsLoadedWhenItIs(t *testing.T) {
	t.Parallel() // mostly waiting for polls and timeouts
	n, dir := adminTLSNode(t, "")
	reviewPair(t, dir, "admin", 2, time.Now().Add(5*time.Second), time.Now().Add(48*time.Hour))
	time.Sleep(5*time.Second + 2*fileCertPoll)
	// Valid since a few polls: it should be served now.
	deadline := time.Now().Add(5 * fileCertPoll)
	for {
		s := adminSerial(n.AdminAddr())
		if s == 2 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the admin listener still serves serial %d; the valid pair on disk (serial 2) is never loaded", s)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestTheAdminListenerClosesIdleConnections: anyone who can reach
// the admin listener (which admin.tls exists to put on a network) can
// hold connections open for ever without the token: the admin server has
// no IdleTimeout (nor ReadTimeout), so after one unauthenticated request
// (HTTP/1.1) or just the HTTP/2 preface, the connection is never closed,
// whatever limits.idle_timeout says. Each held connection is a file
// descriptor of the process that also serves the public listener.
func TestTheAdminListenerClosesIdleConnections(t *testing.T) {
	t.Parallel() // mostly waiting for polls and timeouts
	n, _ := adminTLSNode(t, "limits: {idle_timeout: 2s}\n")
	const within = 14 * time.Second // limits.idle_timeout, or the 10 s header timeout, with slack
	var wg sync.WaitGroup
	check := func(proto string, start func(c *tls.Conn) error) {
		defer wg.Done()
		c, err := tls.Dial("tcp", n.AdminAddr(), &tls.Config{InsecureSkipVerify: true, NextProtos: []string{proto}})
		if err != nil {
			t.Error(proto, err)
			return
		}
		defer c.Close()
		if err := start(c); err != nil {
			t.Error(proto, err)
			return
		}
		_ = c.SetReadDeadline(time.Now().Add(within))
		began := time.Now()
		for {
			if _, err := c.Read(make([]byte, 4096)); err != nil {
				if ne, ok := err.(net.Error); ok && ne.Timeout() {
					t.Errorf("%s: an idle admin connection is still open after %v (limits.idle_timeout 2s)", proto, time.Since(began).Round(time.Second))
				}
				return
			}
		}
	}
	wg.Add(2)
	go check("http/1.1", func(c *tls.Conn) error {
		if _, err := io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
			return err
		}
		resp, err := readResp(c)
		if err == nil && resp != "" {
			return nil
		}
		return err
	})
	go check("h2", func(c *tls.Conn) error {
		// The client preface and an empty SETTINGS frame; nothing more.
		_, err := c.Write(append([]byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"), 0, 0, 0, 4, 0, 0, 0, 0, 0))
		return err
	})
	wg.Wait()
}

func readResp(c net.Conn) (string, error) {
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	br := bufio.NewReader(c)
	line, err := br.ReadString('\n')
	if err != nil {
		return "", err
	}
	for {
		l, err := br.ReadString('\n')
		if err != nil {
			return "", err
		}
		if l == "\r\n" {
			break
		}
	}
	_, _ = br.Discard(br.Buffered())
	return line, nil
}

// TestAdminHandshakeErrorsGoToTheNodesLog: the admin
// server has no ErrorLog, so every failed handshake (a plain HTTP
// request, a TCP probe, a scanner) is written by net/http to the
// standard library's global logger (stderr, unstructured text), not to
// the node's slog logger: a JSON log stream (log.format json) gets a
// free-text line per connection from anyone who can reach the port. The
// public TLS listener routes the same messages to the node's logger at
// debug level.
func TestAdminHandshakeErrorsGoToTheNodesLog(t *testing.T) {
	var buf bytes.Buffer
	var mu sync.Mutex
	log.SetOutput(writerFunc(func(p []byte) (int, error) { mu.Lock(); defer mu.Unlock(); return buf.Write(p) }))
	t.Cleanup(func() { log.SetOutput(os.Stderr) })
	n, _ := adminTLSNode(t, "")
	for i := 0; i < 3; i++ {
		c, err := net.Dial("tcp", n.AdminAddr())
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.WriteString(c, "GET /metrics HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer tok\r\n\r\n")
		_, _ = io.ReadAll(c)
		c.Close()
	}
	time.Sleep(200 * time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	if got := buf.String(); strings.Contains(got, "TLS handshake error") {
		t.Errorf("the admin listener writes handshake errors to the global logger (stderr):\n%s", got)
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// TestAdminHandshakeSlowlorisIsCut: connections that stall in
// the handshake are cut by the header timeout and do not keep others
// from being served.
func TestAdminHandshakeSlowlorisIsCut(t *testing.T) {
	t.Parallel() // mostly waiting for polls and timeouts
	n, _ := adminTLSNode(t, "")
	var conns []net.Conn
	for i := 0; i < 300; i++ {
		c, err := net.Dial("tcp", n.AdminAddr())
		if err != nil {
			t.Fatal(err)
		}
		_, _ = c.Write([]byte{0x16, 0x03, 0x01, 0x02, 0x00, 0x01}) // a ClientHello that never ends
		conns = append(conns, c)
	}
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	began := time.Now()
	if s := adminSerial(n.AdminAddr()); s != 1 {
		t.Fatalf("a handshake among stalled ones: serial %d", s)
	}
	if d := time.Since(began); d > time.Second {
		t.Errorf("a handshake took %v with stalled ones open", d)
	}
	_ = conns[0].SetReadDeadline(time.Now().Add(15 * time.Second))
	if _, err := conns[0].Read(make([]byte, 1)); err != nil {
		if ne, ok := err.(net.Error); ok && ne.Timeout() {
			t.Error("a stalled handshake is not cut within 15s")
		}
	}
}

// TestAdminTLSVersionsAndSuitesMatchThePublicListener: the admin
// listener accepts no TLS version or TLS 1.2 suite the public one refuses.
func TestAdminTLSVersionsAndSuitesMatchThePublicListener(t *testing.T) {
	dir := t.TempDir()
	cp, kp := reviewPair(t, dir, "pub", 5, time.Now().Add(-time.Hour), time.Now().Add(24*time.Hour))
	n, _ := adminTLSNode(t, "tls: {listen: '127.0.0.1:0', cert_file: '"+cp+"', key_file: '"+kp+"'}\n")
	pub := n.tls.ln.Addr().String()
	try := func(addr string, c *tls.Config) bool {
		conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 2 * time.Second}, "tcp", addr, c)
		if err != nil {
			return false
		}
		conn.Close()
		return true
	}
	for _, v := range []uint16{tls.VersionTLS10, tls.VersionTLS11} {
		if try(n.AdminAddr(), &tls.Config{InsecureSkipVerify: true, MinVersion: v, MaxVersion: v}) {
			t.Errorf("admin accepts %s", tls.VersionName(v))
		}
	}
	accepted := 0
	defer func() {
		if accepted == 0 {
			t.Error("no TLS 1.2 suite accepted by admin: the test checks nothing")
		}
		t.Logf("%d TLS 1.2 suites accepted by admin", accepted)
	}()
	for _, s := range append(tls.CipherSuites(), tls.InsecureCipherSuites()...) {
		c := &tls.Config{InsecureSkipVerify: true, MaxVersion: tls.VersionTLS12, CipherSuites: []uint16{s.ID}}
		a, p := try(n.AdminAddr(), c), try(pub, c)
		if a {
			accepted++
		}
		if a && !p {
			t.Errorf("admin accepts %s, the public listener does not", s.Name)
		}
	}
}

// TestPlainHTTPToTheTLSAdminListenerGetsNothing: plain HTTP, h2c prior knowledge
// and an HTTP/1.0 request with the token get no admin answer.
func TestPlainHTTPToTheTLSAdminListenerGetsNothing(t *testing.T) {
	n, _ := adminTLSNode(t, "")
	for _, req := range []string{
		"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n",
		"GET /status.json HTTP/1.0\r\nAuthorization: Bearer tok\r\n\r\n",
		"POST /purge?prefix=/ HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer tok\r\nContent-Length: 0\r\n\r\n",
		"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
		"OPTIONS * HTTP/1.1\r\nHost: x\r\n\r\n",
	} {
		c, err := net.Dial("tcp", n.AdminAddr())
		if err != nil {
			t.Fatal(err)
		}
		_ = c.SetDeadline(time.Now().Add(12 * time.Second))
		_, _ = io.WriteString(c, req)
		got, _ := io.ReadAll(c)
		c.Close()
		if s := string(got); strings.Contains(s, "200") || strings.Contains(s, "edge_") || strings.Contains(s, "purged") {
			t.Errorf("%q: %q", req, s)
		}
	}
}

// TestBrokenAdminCertificateRotationsKeepServing: an expired pair, a key that
// does not match, garbage and deleted files are not served and do not
// take the listener down; a good pair after them is served.
func TestBrokenAdminCertificateRotationsKeepServing(t *testing.T) {
	t.Parallel() // mostly waiting for polls and timeouts
	n, dir := adminTLSNode(t, "")
	cp, kp := filepath.Join(dir, "admin.crt"), filepath.Join(dir, "admin.key")
	otherDir := t.TempDir()
	_, otherKey := reviewPair(t, otherDir, "o", 7, time.Now().Add(-time.Hour), time.Now().Add(time.Hour))
	otherKeyPEM, _ := os.ReadFile(otherKey)
	steps := []func(){
		func() { reviewPair(t, dir, "admin", 2, time.Now().Add(-2*time.Hour), time.Now().Add(-time.Hour)) },
		func() {
			reviewPair(t, dir, "admin", 3, time.Now().Add(-time.Hour), time.Now().Add(time.Hour))
			_ = os.WriteFile(kp, otherKeyPEM, 0o600)
		},
		func() { _ = os.WriteFile(cp, []byte("garbage"), 0o600) },
		func() { _ = os.Remove(cp); _ = os.Remove(kp) },
		func() { _ = os.Mkdir(cp, 0o700) },
	}
	for i, step := range steps {
		step()
		time.Sleep(fileCertPoll + 500*time.Millisecond) // one poll has looked
		if s := adminSerial(n.AdminAddr()); s != 1 {
			t.Errorf("step %d: the admin listener serves %d, want the previous 1", i, s)
		}
	}
	_ = os.Remove(cp)
	reviewPair(t, dir, "admin", 4, time.Now().Add(-time.Hour), time.Now().Add(time.Hour))
	time.Sleep(fileCertPoll + 500*time.Millisecond)
	if s := adminSerial(n.AdminAddr()); s != 4 {
		t.Errorf("a good pair after the broken ones: serves %d, want 4", s)
	}
}

// TestAdminTLSConfigValidation: half a pair is refused by config, a
// directory as a file by New; both empty (or blank) is plain HTTP.
func TestAdminTLSConfigValidation(t *testing.T) {
	dir := t.TempDir()
	cp, kp := reviewPair(t, dir, "a", 1, time.Now().Add(-time.Hour), time.Now().Add(time.Hour))
	pub, adm := twoFreePorts(t)
	base := "origin: {url: 'http://127.0.0.1:1'}\nlisten: '" + pub + "'\nadmin: {listen: '" + adm + "', tls: "
	for _, tc := range []struct{ tls, want string }{
		{"{cert_file: '" + cp + "'}", "config"},
		{"{key_file: '" + kp + "'}", "config"},
		{"{cert_file: '" + cp + "', key_file: ''}", "config"},
		{"{cert_file: '" + dir + "', key_file: '" + kp + "'}", "new"},
		{"{cert_file: '" + cp + "', key_file: '" + dir + "'}", "new"},
		{"{cert_file: ' ', key_file: ' '}", "ok"}, // trimmed to empty: plain HTTP, as with '',
		{"{cert_file: '', key_file: ''}", "ok"},
	} {
		cfg, err := config.LoadBytes([]byte(base + tc.tls + "}\n"))
		if tc.want == "config" {
			if err == nil {
				t.Errorf("%s: config accepted", tc.tls)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: config: %v", tc.tls, err)
			continue
		}
		n, err := New(cfg, slog.New(slog.DiscardHandler))
		if (err == nil) != (tc.want == "ok") {
			t.Errorf("%s: New: %v", tc.tls, err)
		}
		if n != nil {
			n.admLn.Close()
			n.pubLn.Close()
		}
	}
}
