package main

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// httpsNode is an edge process with a TLS listener, HTTP/3, two
// certificates chosen by SNI, HSTS and the plain listener redirecting.
type httpsNode struct {
	pub, tls, adm string
	ca            *testCA
	dir           string
	cmd           *exec.Cmd
	aCert, aKey   string
	spki          string
}

func startHTTPSNode(t *testing.T, redirect bool) *httpsNode {
	t.Helper()
	origin := freeAddr(t)
	startOrigin(t, origin, "0s")
	n := &httpsNode{pub: freeAddr(t), tls: freeAddr(t), adm: freeAddr(t), ca: newTestCA(t), dir: t.TempDir()}
	now := time.Now()
	n.aCert, n.aKey, n.spki = n.ca.leaf(t, n.dir, "a", 10, now.Add(-time.Hour), now.Add(time.Hour), "localhost", "a.test")
	bCert, bKey, _ := n.ca.leaf(t, n.dir, "b", 20, now.Add(-time.Hour), now.Add(time.Hour), "*.b.test")
	conf := fmt.Sprintf(`origin:
  url: "http://%s"
listen: "%s"
admin:
  listen: "%s"
tls:
  listen: "%s"
  cert_file: "%s"
  key_file: "%s"
  certificates:
    - cert_file: "%s"
      key_file: "%s"
  http3: true
  hsts: "max-age=300"
http:
  redirect_to_https: %v
`, origin, n.pub, n.adm, n.tls, n.aCert, n.aKey, bCert, bKey, redirect)
	file := filepath.Join(n.dir, "edge.yaml")
	if err := os.WriteFile(file, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	n.cmd = startEdge(t, "serve", "-c", file, "--node-id", "edge-tls")
	waitUp(t, "http://"+n.adm+"/readyz")
	return n
}

// client returns an HTTP client over TLS that trusts the test CA, dials
// the node whatever the URL's host, and speaks h1, h2 or h3.
func (n *httpsNode) client(proto string) *http.Client {
	tc := &tls.Config{RootCAs: n.ca.pool}
	dial := func(ctx context.Context, network, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, network, n.tls)
	}
	switch proto {
	case "h3":
		return &http.Client{Timeout: 10 * time.Second, Transport: &http3.Transport{TLSClientConfig: tc,
			Dial: func(ctx context.Context, _ string, tlsCfg *tls.Config, cfg *quic.Config) (*quic.Conn, error) {
				return quic.DialAddrEarly(ctx, n.tls, tlsCfg, cfg)
			}}}
	case "h2":
		return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: tc, DialContext: dial, ForceAttemptHTTP2: true, DisableCompression: true}}
	}
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: tc, DialContext: dial,
		TLSNextProto: map[string]func(string, *tls.Conn) http.RoundTripper{}, DisableCompression: true}}
}

func fetch(t *testing.T, c *http.Client, url string) (*http.Response, string) {
	t.Helper()
	resp, err := c.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// TestHTTPSEndToEnd serves the same cache over HTTP/1.1, HTTP/2 and HTTP/3
// with certificates chosen by SNI, re-read from disk when they change, and
// shared entries between http and https.
func TestHTTPSEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	n := startHTTPSNode(t, false)
	_, port, _ := net.SplitHostPort(n.tls)

	// Plain HTTP fills the entry; every HTTPS protocol hits it (http and
	// https share entries by default).
	plain, _ := http.NewRequest("GET", "http://"+n.pub+"/p/5", nil)
	plain.Host = "a.test"
	if resp, err := http.DefaultClient.Do(plain); err != nil || resp.StatusCode != 200 {
		t.Fatalf("plain: %v", err)
	} else {
		// Read to the end: the fill stores the entry before its last
		// bytes reach a reader, so the HTTPS requests find it stored
		// rather than joining a fill still in flight.
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	for _, proto := range []string{"h1", "h2", "h3"} {
		url := "https://a.test:" + port + "/p/5"
		resp, body := fetch(t, n.client(proto), url)
		want := map[string]int{"h1": 1, "h2": 2, "h3": 3}[proto]
		if resp.StatusCode != 200 || resp.ProtoMajor != want || len(body) == 0 {
			t.Fatalf("%s: %d %s", proto, resp.StatusCode, resp.Proto)
		}
		if cs := resp.Header.Get("Cache-Status"); cs != "edge-tls; hit" {
			t.Errorf("%s: Cache-Status %q, want a hit on the entry plain HTTP filled", proto, cs)
		}
		if alt := resp.Header.Get("Alt-Svc"); alt != `h3=":`+port+`"; ma=86400` {
			t.Errorf("%s: Alt-Svc %q", proto, alt)
		}
		if resp.Header.Get("Strict-Transport-Security") != "max-age=300" {
			t.Errorf("%s: no HSTS", proto)
		}
	}
	// SNI picks the wildcard certificate; an unknown name gets the first.
	if s := peerSerial(t, n.tls, "x.b.test", n.ca.pool); s != 20 {
		t.Errorf("x.b.test got certificate %d, want the *.b.test one (20)", s)
	}
	if s := peerSerial(t, n.tls, "a.test", n.ca.pool); s != 10 {
		t.Errorf("a.test got certificate %d, want 10", s)
	}
	// A renewed certificate on disk is served without a restart.
	now := time.Now()
	n.ca.leaf(t, n.dir, "a", 11, now.Add(-time.Hour), now.Add(2*time.Hour), "localhost", "a.test")
	waitFor(t, "the renewed certificate", 10*time.Second, func() bool { return peerSerial(t, n.tls, "a.test", n.ca.pool) == 11 })
	// A broken replacement keeps the good certificate.
	writeAtomically(t, n.aCert, []byte("not a certificate"))
	time.Sleep(3 * time.Second)
	if s := peerSerial(t, n.tls, "a.test", n.ca.pool); s != 11 {
		t.Errorf("after a broken file: certificate %d, want the previous one (11)", s)
	}
	if v := metric(t, n.adm, `edge_tls_certificate_reloads_total{result="error"}`); v < 1 {
		t.Errorf("reload errors: %v", v)
	}
	// Protocol counters and the status page.
	if v := metric(t, n.adm, `edge_http_requests_by_protocol_total{protocol="h3"}`); v < 1 {
		t.Errorf("h3 requests: %v", v)
	}
	if _, page := get(t, "http://"+n.adm+"/status"); !strings.Contains(page, "HTTP/3") || !strings.Contains(page, "*.b.test") {
		t.Errorf("the status page lacks the HTTPS section")
	}
}

// TestHTTPSRedirect: the plain listener answers 308 to the https URL.
func TestHTTPSRedirect(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	n := startHTTPSNode(t, true)
	_, port, _ := net.SplitHostPort(n.tls)
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	req, _ := http.NewRequest("GET", "http://"+n.pub+"/p/1?x=1", nil)
	req.Host = "a.test"
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusPermanentRedirect || resp.Header.Get("Cache-Status") == "" || resp.Header.Get("Location") != "https://a.test:"+port+"/p/1?x=1" {
		t.Errorf("redirect: %d %q", resp.StatusCode, resp.Header.Get("Location"))
	}
}

// TestHTTPSHostileClients: TLS 1.0 is refused; garbage ClientHellos, a
// flood of junk QUIC datagrams and an HTTP/2 rapid-reset burst leave hits
// flowing and memory bounded.
func TestHTTPSHostileClients(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	n := startHTTPSNode(t, false)
	_, port, _ := net.SplitHostPort(n.tls)
	url := "https://a.test:" + port + "/p/9"
	h2c := n.client("h2")
	fetch(t, h2c, url)
	probe := func(what string) {
		t.Helper()
		for _, proto := range []string{"h2", "h3"} {
			resp, _ := fetch(t, n.client(proto), url)
			if resp.StatusCode != 200 || resp.Header.Get("Cache-Status") != "edge-tls; hit" {
				t.Errorf("after %s: %s %d %q", what, proto, resp.StatusCode, resp.Header.Get("Cache-Status"))
			}
		}
	}
	rss0 := rssBytes(t, n.cmd.Process.Pid)

	// TLS 1.0 and 1.1 only: refused.
	for _, v := range []uint16{tls.VersionTLS10, tls.VersionTLS11} {
		c, err := tls.Dial("tcp", n.tls, &tls.Config{RootCAs: n.ca.pool, ServerName: "a.test", MinVersion: v, MaxVersion: v})
		if err == nil {
			c.Close()
			t.Errorf("a TLS %x client was accepted", v)
		}
	}
	// Garbage where a ClientHello belongs, from 50 connections.
	var wg sync.WaitGroup
	for i := range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := net.Dial("tcp", n.tls)
			if err != nil {
				return
			}
			defer c.Close()
			junk := make([]byte, 512+i*100)
			_, _ = rand.Read(junk)
			if i%2 == 0 {
				junk[0], junk[1], junk[2] = 0x16, 0x03, 0x01 // a handshake record header, then garbage
			}
			_ = c.SetDeadline(time.Now().Add(2 * time.Second))
			_, _ = c.Write(junk)
			_, _ = io.Copy(io.Discard, c)
		}()
	}
	wg.Wait()
	probe("garbage ClientHellos")

	// 20000 junk datagrams at the QUIC port.
	u, err := net.Dial("udp", n.tls)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 20000 {
		junk := make([]byte, 20+i%1200)
		_, _ = rand.Read(junk)
		if i%3 == 0 {
			junk[0] = 0xc0 // a long-header (Initial-looking) packet
		}
		_, _ = u.Write(junk)
	}
	u.Close()
	probe("a junk QUIC flood")

	// HTTP/2 rapid reset: streams opened and cancelled at once, 5 x 1000.
	for range 5 {
		rapidReset(t, n.tls, "a.test", n.ca, 1000)
	}
	probe("an HTTP/2 rapid-reset burst")

	rss := rssBytes(t, n.cmd.Process.Pid)
	t.Logf("RSS before the attacks %d MiB, after %d MiB", rss0>>20, rss>>20)
	if rss > rss0+256<<20 {
		t.Errorf("RSS grew from %d to %d MiB", rss0>>20, rss>>20)
	}
}

// rapidReset opens n streams on one HTTP/2 connection, cancelling each
// right after its HEADERS (CVE-2023-44487's pattern).
func rapidReset(t *testing.T, addr, sni string, ca *testCA, n int) {
	t.Helper()
	c, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: ca.pool, ServerName: sni, NextProtos: []string{"h2"}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(c, c)
	_ = fr.WriteSettings()
	go func() { // drain what the server sends so it never blocks on us
		for {
			if _, err := fr.ReadFrame(); err != nil {
				return
			}
		}
	}()
	var hb strings.Builder
	enc := hpack.NewEncoder(&hb)
	for i := range n {
		hb.Reset()
		for _, f := range [][2]string{{":method", "GET"}, {":scheme", "https"}, {":authority", sni}, {":path", "/p/9"}} {
			_ = enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
		}
		id := uint32(2*i + 1)
		if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: []byte(hb.String()), EndStream: true, EndHeaders: true}); err != nil {
			return // the server may close a connection that abuses it: the point
		}
		if err := fr.WriteRSTStream(id, http2.ErrCodeCancel); err != nil {
			return
		}
	}
}

// TestBadCertificateStopsStartup: an expired certificate, a key that does
// not match it, or a missing file stop startup with the key named.
func TestBadCertificateStopsStartup(t *testing.T) {
	ca := newTestCA(t)
	dir := t.TempDir()
	now := time.Now()
	expCert, expKey, _ := ca.leaf(t, dir, "expired", 1, now.Add(-48*time.Hour), now.Add(-24*time.Hour), "a.test")
	goodCert, _, _ := ca.leaf(t, dir, "good", 2, now.Add(-time.Hour), now.Add(time.Hour), "a.test")
	_, otherKey, _ := ca.leaf(t, dir, "other", 3, now.Add(-time.Hour), now.Add(time.Hour), "b.test")
	futureCert, futureKey, _ := ca.leaf(t, dir, "future", 4, now.Add(time.Hour), now.Add(2*time.Hour), "a.test")
	for name, tc := range map[string]struct {
		args []string
		want []string
	}{
		"expired":    {[]string{"--tls-cert", expCert, "--tls-key", expKey}, []string{"tls.cert_file", "expired"}},
		"mismatched": {[]string{"--tls-cert", goodCert, "--tls-key", otherKey}, []string{"tls.cert_file", "cannot be used with its key file"}},
		"missing":    {[]string{"--tls-cert", filepath.Join(dir, "nope.crt"), "--tls-key", otherKey}, []string{"tls.cert_file", "nope.crt"}},
		"not yet":    {[]string{"--tls-cert", futureCert, "--tls-key", futureKey}, []string{"tls.cert_file", "not valid before"}},
		"no cert":    {nil, []string{"tls.listen", "needs a certificate"}},
	} {
		args := append([]string{"serve", "--origin", "http://127.0.0.1:1", "--listen", freeAddr(t), "--admin-listen", freeAddr(t), "--tls-listen", freeAddr(t)}, tc.args...)
		cmd := exec.Command(os.Args[0], args...)
		cmd.Env = append(os.Environ(), "EDGE_TEST_AS_MAIN=1")
		done := make(chan struct{})
		var out []byte
		var err error
		go func() { out, err = cmd.CombinedOutput(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
			t.Fatalf("%s: edge serve did not stop", name)
		}
		if err == nil {
			t.Errorf("%s: edge serve started", name)
		}
		for _, w := range tc.want {
			if !strings.Contains(string(out), w) {
				t.Errorf("%s: the error lacks %q: %s", name, w, out)
			}
		}
	}
}
