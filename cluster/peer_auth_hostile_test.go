package cluster

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edgecache/edge/proxy"
	"github.com/prometheus/client_golang/prometheus"
)

// patient gives c's peer client connect and response budgets that a
// loaded machine cannot exhaust: tests that are not about timing must not
// fail on a 200 ms loopback dial or an 800 ms wait for headers under make
// test's parallel load.
func patient(c *Cluster) {
	tr := c.client.Transport.(*http.Transport)
	tr.DialContext = (&net.Dialer{Timeout: 10 * time.Second}).DialContext
	tr.ResponseHeaderTimeout = 10 * time.Second
	// The peer client that sends data requests too: a home that encodes a
	// large page on a loaded -race run can take seconds to its header.
	c.peerHTTP.headerTimeout = 10 * time.Second
}

// originAt is a plain origin fetcher for the test origin at base.
func originAt(base string) proxy.FetcherFunc {
	return func(ctx context.Context, req *http.Request) (*http.Response, error) {
		out := req.Clone(ctx)
		u := *req.URL
		u.Scheme, u.Host = "http", strings.TrimPrefix(base, "http://")
		out.URL, out.RequestURI = &u, ""
		return http.DefaultTransport.RoundTrip(out)
	}
}

func peerWith(t *testing.T, fn http.HandlerFunc) (*Cluster, *Peer) {
	t.Helper()
	c := playing(newTestCluster(t, "hybrid", map[string]string{"n1": "127.0.0.1:1"}), "n1") // it answers itself as n1
	patient(c)
	srv := httptest.NewServer(c.PeerHandler(ignoreInbound(fn), func(proxy.PurgeRequest) (int, error) { return 0, nil }))
	t.Cleanup(srv.Close)
	return c, &Peer{ID: "n1", Addr: strings.TrimPrefix(srv.URL, "http://")}
}

func climbReq(c *Cluster, p *Peer, hdr ...string) (*http.Response, error) {
	req := httptest.NewRequest("GET", "http://h/p/1", nil)
	req.RequestURI = ""
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	req.Header.Set(hdrMode, "climb")
	req.Header.Set(hdrHop, "1")
	return c.send(req, p)
}

// Regression test for a bug found in review: legitimate bodiless peer responses fail authentication.
func TestHostilePeer204And304(t *testing.T) {
	c, p := peerWith(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=60")
		w.WriteHeader(http.StatusNoContent)
	})
	resp, err := climbReq(c, p)
	if err != nil {
		t.Fatalf("204: %v", err)
	}
	_, err = io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Errorf("204 No Content from a peer: reading its (empty) body fails: %v", err)
	}

	c, p = peerWith(t, func(w http.ResponseWriter, r *http.Request) {
		// what stream() relays from an origin that sends Content-Type on a 304
		w.Header().Set("Content-Type", "text/html")
		w.Header().Set("Etag", `"1"`)
		w.WriteHeader(http.StatusNotModified)
	})
	if _, err := climbReq(c, p, "If-None-Match", `"1"`); err != nil {
		t.Errorf("304 with Content-Type from a peer refused: %v", err)
	}
}

// Regression test for a bug found in review: the replay cache's check and insert are not atomic.
func TestHostileConcurrentReplay(t *testing.T) {
	secret := []byte("0123456789abcdef")
	accepted := 0
	for trial := 0; trial < 5000 && accepted < 2; trial++ {
		r := httptest.NewRequest("GET", "http://example.com/a", nil)
		sign(secret, "n1", "n2", r)
		v := newVerifier(secret, "n2")
		var ok atomic.Int32
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := 0; i < 8; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				c := r.Clone(context.Background())
				<-start
				if v.verify(c, time.Now()) == "" {
					ok.Add(1)
				}
			}()
		}
		close(start)
		wg.Wait()
		accepted = int(ok.Load())
	}
	if accepted > 1 {
		t.Errorf("one signed request accepted %d times", accepted)
	}
	fmt.Println("accepted", accepted)
}

func TestHostilePeerExpectHeader(t *testing.T) {
	c, p := peerWith(t, func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "ok")
	})
	for _, kv := range [][2]string{{"Expect", "100-continue"}, {"X-Empty-Then", ""}} {
		resp, err := climbReq(c, p, kv[0], kv[1])
		if err != nil {
			t.Errorf("%s: %v", kv[0], err)
			continue
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		t.Logf("%s=%q: %d %q %v", kv[0], kv[1], resp.StatusCode, b, err)
	}
}

// Regression test for a bug found in review: with cluster.tls the peer computes cache keys with scheme https
// (r.TLS is set on the peer listener), unlike the ingress (http).
func TestHostilePeerTLSKeyScheme(t *testing.T) {
	originSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=600")
		_, _ = io.WriteString(w, "v1")
	}))
	defer originSrv.Close()
	store := proxy.NewStore(1<<20, 4)
	of := originAt(originSrv.URL)
	peerCl := newTestCluster(t, "hybrid", map[string]string{"n0": "127.0.0.1:1"})
	ph := proxy.New(proxy.DefaultConfig(), store, of, proxy.NewMetrics(prometheus.NewRegistry(), store), nil)
	srv := httptest.NewTLSServer(peerCl.PeerHandler(ph.ServeInbound, ph.Purge))
	defer srv.Close()
	c := newTestCluster(t, "hybrid", map[string]string{"n1": "127.0.0.1:1"})
	c.scheme = "https"
	c.client = &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, DisableCompression: true}}
	req := httptest.NewRequest("GET", "http://h/p/1", nil)
	req.RequestURI = ""
	req.Header.Set(hdrMode, "climb")
	req.Header.Set(hdrHop, "1")
	u := *req.URL
	u.Scheme, u.Host = "https", strings.TrimPrefix(srv.URL, "https://")
	req.URL = &u
	sign(c.cfg.Secret, "n0", c.cfg.NodeID, req)
	resp, err := c.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("raw: %d %v", resp.StatusCode, resp.Header)
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	ph.Wait()
	keys := store.Keys(func(string) bool { return true })
	n, _ := ph.Purge(proxy.PurgeRequest{URL: "http://h/p/1"})
	t.Logf("peer stored keys %v; purge of http://h/p/1 removed %d", keys, n)
	if n == 0 {
		t.Errorf("purge fan-out (http:// URL) misses the peer's copy")
	}
}
