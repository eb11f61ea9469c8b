package cluster

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/edgecache/edge/proxy"
)

func TestSignAndVerify(t *testing.T) {
	secret := []byte("0123456789abcdef")
	r := httptest.NewRequest("GET", "http://example.com/a?b=1", nil)
	r.Header.Set(hdrMode, "climb")
	r.Header.Set(hdrPath, "n2:3,n3:2")
	r.Header.Set("Accept-Language", "de")
	sign(secret, "n1", "n2", r)
	now := time.Now()
	tamper := func(f func(*http.Request)) string {
		c := r.Clone(context.Background())
		f(c)
		return newVerifier(secret, "n2").verify(c, now)
	}
	cases := map[string]struct {
		f    func(*http.Request)
		want string
	}{
		"path":          {func(c *http.Request) { c.Header.Set(hdrPath, "evil:2") }, "mac"},
		"query":         {func(c *http.Request) { c.URL.RawQuery = "b=2" }, "mac"},
		"changed field": {func(c *http.Request) { c.Header.Set("Accept-Language", "en") }, "mac"},
		"added field":   {func(c *http.Request) { c.Header.Set("X-Forwarded-Host", "evil.example") }, "mac"},
		"removed field": {func(c *http.Request) { c.Header.Del("Accept-Language") }, "mac"},
		"host":          {func(c *http.Request) { c.Host = "other.example" }, "mac"},
		"unsigned":      {func(c *http.Request) { c.Header.Del(hdrAuth) }, "unsigned"},
		"skew":          {func(c *http.Request) { c.Header.Set(hdrTime, strconv.FormatInt(now.Add(-time.Minute).UnixNano(), 10)) }, "skew"},
		"malformed":     {func(c *http.Request) { c.Header.Set(hdrTime, "x") }, "malformed"},
		"no nonce":      {func(c *http.Request) { c.Header.Del(hdrNonce) }, "malformed"},
		"receiver":      {func(c *http.Request) { c.Header.Set(hdrTo, "n3") }, "mac"},
		"no receiver":   {func(c *http.Request) { c.Header.Del(hdrTo) }, "mac"},
		"framing":       {func(c *http.Request) { c.Header.Set("Content-Length", "0") }, ""},
	}
	for name, tc := range cases {
		if got := tamper(tc.f); got != tc.want {
			t.Errorf("%s: got %q, want %q", name, got, tc.want)
		}
	}
	if reason := newVerifier(secret, "n3").verify(r, now); reason != "misdirected" {
		t.Errorf("a request signed for n2, taken by n3: %q, want misdirected", reason)
	}
	v := newVerifier(secret, "n2")
	if reason := v.verify(r, now); reason != "" {
		t.Fatalf("valid request rejected: %s", reason)
	}
	if reason := v.verify(r, now); reason != "replay" {
		t.Fatalf("replayed request: %q, want replay", reason)
	}
	if newVerifier([]byte("another-secret-16"), "n2").verify(r, now) != "mac" {
		t.Error("wrong secret accepted")
	}
}

// peerPair serves c's peer handler (answering with body) and returns a
// cluster whose peer points at it through an optional tampering relay.
func peerPair(t *testing.T, body string, relay func(http.Header, []byte) []byte) (*Cluster, *Peer) {
	t.Helper()
	c := playing(newTestCluster(t, "hybrid", map[string]string{"n1": "127.0.0.1:1"}), "n1")
	h := c.PeerHandler(ignoreInbound(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		w.Header().Set("Cache-Control", "max-age=60")
		_, _ = io.WriteString(w, body)
	}), func(proxy.PurgeRequest) (int, error) { return 0, nil })
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	addr := strings.TrimPrefix(srv.URL, "http://")
	if relay != nil {
		// A transport that adds nothing to the signed request: Go's
		// default adds Accept-Encoding, and a User-Agent where the signer
		// left it empty, which the peer refused, so every tampered case
		// below was refused for the relay's fault and proved nothing (a
		// review's TestS6PeerPairRelayIsTransparent).
		// The peer's own address, taken before addr becomes the relay's
		// (the closure read addr, and so relayed to itself).
		tr, home := &http.Transport{DisableCompression: true}, addr
		t.Cleanup(tr.CloseIdleConnections)
		front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			out := r.Clone(r.Context())
			out.RequestURI = ""
			out.URL.Scheme, out.URL.Host = "http", home
			if _, ok := out.Header["User-Agent"]; !ok {
				out.Header["User-Agent"] = []string{""}
			}
			resp, err := tr.RoundTrip(out)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadGateway)
				return
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			for k, v := range resp.Header {
				w.Header()[k] = v
			}
			b = relay(w.Header(), b)
			w.Header().Set("Trailer", hdrBodyAuth)
			w.WriteHeader(resp.StatusCode)
			_, _ = w.Write(b)
			w.Header().Set(hdrBodyAuth, resp.Trailer.Get(hdrBodyAuth))
		}))
		t.Cleanup(front.Close)
		addr = strings.TrimPrefix(front.URL, "http://")
	}
	return c, &Peer{ID: "n1", Addr: addr}
}

func climbTo(c *Cluster, p *Peer) (string, error) {
	req := httptest.NewRequest("GET", "http://h/p/1", nil)
	req.RequestURI = ""
	req.Header.Set(hdrMode, "climb")
	req.Header.Set(hdrHop, "1")
	resp, err := c.send(req, p)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

// TestPeerResponsesAreAuthenticated: a peer response whose header or body
// was changed in transit is refused (never handed to the proxy to store).
func TestPeerResponsesAreAuthenticated(t *testing.T) {
	c, p := peerPair(t, "the real page", nil)
	if body, err := climbTo(c, p); err != nil || body != "the real page" {
		t.Fatalf("untouched response: %q, %v", body, err)
	}
	c, p = peerPair(t, "the real page", func(h http.Header, b []byte) []byte { h.Set("Set-Cookie", "sid=attacker"); return b })
	if _, err := climbTo(c, p); err == nil || !strings.Contains(err.Error(), "authentication") {
		t.Fatalf("a response with an added header field: %v, want it refused as unauthenticated", err)
	}
	c, p = peerPair(t, "the real page", func(h http.Header, b []byte) []byte { return []byte("the fake page") })
	if body, err := climbTo(c, p); err == nil || !strings.Contains(err.Error(), "authentication") {
		t.Fatalf("a response with a changed body: %q, %v, want it refused as unauthenticated", body, err)
	}
}

// TestPeerMutualTLS: with cluster TLS, a peer request succeeds with a
// certificate from the cluster CA and fails without one.
func TestPeerMutualTLS(t *testing.T) {
	ca, caKey := newCA(t)
	serverCert := leafCert(t, ca, caKey, "n1")
	clientCert := leafCert(t, ca, caKey, "n0")
	pool := x509.NewCertPool()
	pool.AddCert(ca)

	c := playing(newTestCluster(t, "hybrid", map[string]string{"n1": "127.0.0.1:1"}), "n1")
	h := c.PeerHandler(ignoreInbound(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "over tls") }),
		func(proxy.PurgeRequest) (int, error) { return 0, nil })
	srv := httptest.NewUnstartedServer(h)
	srv.TLS = ServerTLS(serverCert, pool)
	srv.StartTLS()
	t.Cleanup(srv.Close)
	addr := strings.TrimPrefix(srv.URL, "https://")

	c.cfg.TLS = ClientTLS(clientCert, pool)
	c.client.Transport.(*http.Transport).TLSClientConfig = c.cfg.TLS
	c.scheme = "https"
	if body, err := climbTo(c, &Peer{ID: "n1", Addr: addr}); err != nil || body != "over tls" {
		t.Fatalf("with a cluster certificate: %q, %v", body, err)
	}
	// A client without a certificate is refused by the listener.
	bare := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, InsecureSkipVerify: true}}}
	if resp, err := bare.Get(srv.URL + "/p/1"); err == nil {
		resp.Body.Close()
		t.Fatalf("a client without a certificate got %d", resp.StatusCode)
	}
	// A certificate from another CA is refused too.
	other, otherKey := newCA(t)
	c.cfg.TLS = ClientTLS(leafCert(t, other, otherKey, "n9"), pool)
	c.client = &http.Client{Transport: &http.Transport{TLSClientConfig: c.cfg.TLS}}
	if _, err := climbTo(c, &Peer{ID: "n1", Addr: addr}); err == nil {
		t.Fatal("a certificate from another CA was accepted")
	}
}

func newCA(t *testing.T) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "edge test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(der)
	return ca, key
}

func leafCert(t *testing.T, ca *x509.Certificate, caKey *ecdsa.PrivateKey, name string) tls.Certificate {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// FuzzVerifyRequest: arbitrary peer-protocol fields never panic the
// verifier and are never accepted without the secret.
func FuzzVerifyRequest(f *testing.F) {
	f.Add("n1", "1700000000000000000", "00112233445566778899aabbccddeeff", "deadbeef", "climb")
	f.Add("", "x", "", "", "")
	f.Fuzz(func(t *testing.T, node, ts, nonce, mac, mode string) {
		r := httptest.NewRequest("GET", "http://h/p/1", nil)
		for k, v := range map[string]string{hdrNode: node, hdrTime: ts, hdrNonce: nonce, hdrAuth: mac, hdrMode: mode} {
			r.Header[k] = []string{v}
		}
		if reason := newVerifier([]byte("fuzz-secret-0123"), "n1").verify(r, time.Now()); reason == "" {
			t.Fatalf("accepted a request without the secret: %v", r.Header)
		}
	})
}

// A request that carries a host field in its header map (HTTP/2 and
// HTTP/3 servers leave one beside :authority) is signed as Go's client
// sends it: without the field (it sends r.Host, signed apart). Signed
// over the field, every such request was refused as forged by its peer,
// so any client could keep its own requests off the peers (a review's).
func TestAHostFieldGoesUnsigned(t *testing.T) {
	secret := []byte("0123456789abcdef")
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if reason := newVerifier(secret, "n2").verify(r, time.Now()); reason != "" {
			http.Error(w, reason, http.StatusForbidden)
		}
	}))
	defer srv.Close()
	r, err := http.NewRequest("GET", srv.URL+"/a", nil)
	if err != nil {
		t.Fatal(err)
	}
	r.Header.Set("Host", r.Host)
	r.Header.Set("Accept-Encoding", "identity") // else Go's transport adds gzip after the signing, as the peers' own does not
	r.Header.Set("Accept-Language", "de")
	sign(secret, "n1", "n2", r)
	res, err := srv.Client().Do(r)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	_ = res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Errorf("a signed request with a host field: %d %s", res.StatusCode, b)
	}
}

// An unsigned Connection field on a peer request (a relay may add one)
// cannot make the peer drop a signed field: unsigned fields are gone
// once the MAC is checked, before the proxy deletes what Connection names
// (a review's: "Connection: Cookie" dropped the cookie at the peer).
func TestAnUnsignedConnectionFieldDropsNothingSigned(t *testing.T) {
	got := make(chan http.Header, 1)
	c := playing(newTestCluster(t, "hybrid", map[string]string{"n1": "127.0.0.1:1"}), "n1")
	h := c.PeerHandler(ignoreInbound(func(w http.ResponseWriter, r *http.Request) {
		got <- r.Header.Clone()
		_, _ = io.WriteString(w, "ok")
	}), func(proxy.PurgeRequest) (int, error) { return 0, nil })
	srv := httptest.NewServer(h)
	defer srv.Close()
	req := httptest.NewRequest("GET", "http://h/p/1", nil)
	req.RequestURI = ""
	req.Header.Set(hdrMode, "climb")
	req.Header.Set(hdrHop, "1")
	req.Header.Set("Cookie", "sid=alice")
	req.Header.Set("Connection", "Cookie") // unsigned: as a relay would add it
	resp, err := c.send(req, &Peer{ID: "n1", Addr: strings.TrimPrefix(srv.URL, "http://")})
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	hd := <-got
	if hd.Get("Cookie") != "sid=alice" || hd.Get("Connection") != "" {
		t.Errorf("the peer's handler saw Cookie %q, Connection %q: want the signed cookie and no Connection", hd.Get("Cookie"), hd.Get("Connection"))
	}
}

// A data request made under another site than the one this node gives its
// host (a rolling reload that moved the host) is refused with a 5xx, which
// the asker skips for its own origin; the same site, the shortcut's "/"
// and a request without the field (an older node) are served.
func TestAPeerRequestUnderAnotherSiteIsRefused(t *testing.T) {
	c := playing(newTestCluster(t, "hybrid", map[string]string{"n1": "127.0.0.1:1"}), "n1")
	sites := map[string]string{"moved.test": "new", "plain.test": ""}
	c.cfg.SiteOf = func(host string) string { return sites[host] }
	var served atomic.Int32
	h := c.PeerHandler(ignoreInbound(func(w http.ResponseWriter, r *http.Request) {
		served.Add(1)
		_, _ = io.WriteString(w, "ok")
	}), func(proxy.PurgeRequest) (int, error) { return 0, nil })
	srv := httptest.NewServer(h)
	defer srv.Close()
	peer := &Peer{ID: "n1", Addr: strings.TrimPrefix(srv.URL, "http://")}
	for _, tc := range []struct {
		host, site string // site "-": no Edge-Site field
		want       int
	}{
		{"moved.test", "old", http.StatusServiceUnavailable},
		{"moved.test", "/", http.StatusServiceUnavailable},
		{"moved.test", "new", http.StatusOK},
		{"moved.test", "-", http.StatusOK},
		{"plain.test", "/", http.StatusOK},
		{"plain.test", "new", http.StatusServiceUnavailable},
	} {
		req := httptest.NewRequest("GET", "http://"+tc.host+"/p", nil)
		req.RequestURI = ""
		req.Header.Set(hdrMode, "climb")
		req.Header.Set(hdrHop, "1")
		if tc.site != "-" {
			req.Header.Set(hdrSite, tc.site)
		}
		before := served.Load()
		resp, err := c.send(req, peer)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("%s under %q: %d, want %d", tc.host, tc.site, resp.StatusCode, tc.want)
		}
		if refused := served.Load() == before; refused != (tc.want != http.StatusOK) {
			t.Errorf("%s under %q: handler reached %v", tc.host, tc.site, !refused)
		}
	}
	if got := testutil.ToFloat64(c.metrics.PeerRejected.WithLabelValues("site")); got != 3 {
		t.Errorf("edge_peer_request_rejections_total{reason=site} = %v, want 3", got)
	}
	// The sender names the site of the key it will store the answer under.
	for key, want := range map[string]string{"http://plain.test/p": "/", "old http://moved.test/p": "old"} {
		out := c.peerRequest(context.Background(), httptest.NewRequest("GET", "http://plain.test/p", nil), key)
		if got := out.Header.Get(hdrSite); got != want {
			t.Errorf("a request for key %q carries Edge-Site %q, want %q", key, got, want)
		}
	}
}
