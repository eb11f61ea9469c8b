package cluster

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/edgecache/edge/proxy"
)

// cache.key_scheme on: an https client's request climbing to a peer must be
// stored under the https key there, not the http one (else a plain-http
// client of the peer gets the page the origin made for https).
func TestTLSPeerKeySchemeHTTPS(t *testing.T) {
	originSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=600")
		_, _ = io.WriteString(w, "made for "+r.Header.Get("X-Forwarded-Proto"))
	}))
	defer originSrv.Close()
	store := proxy.NewStore(1<<20, 4)
	of := originAt(originSrv.URL)
	peerCl := newTestCluster(t, "hybrid", map[string]string{"n0": "127.0.0.1:1"})
	pc := proxy.DefaultConfig()
	pc.KeyScheme = true
	ph := proxy.New(pc, store, of, proxy.NewMetrics(prometheus.NewRegistry(), store), nil)
	srv := httptest.NewServer(peerCl.PeerHandler(ph.ServeInbound, ph.Purge))
	defer srv.Close()
	c := newTestCluster(t, "hybrid", map[string]string{"n1": "127.0.0.1:1"})
	patient(c)
	req := httptest.NewRequest("GET", "http://h/p/1", nil)
	req.RequestURI = ""
	req.Header.Set(hdrMode, "climb")
	req.Header.Set(hdrHop, "1")
	req.Header.Set("X-Forwarded-Proto", "https") // what the ingress node forwards for its https client
	u := *req.URL
	u.Host = strings.TrimPrefix(srv.URL, "http://")
	req.URL = &u
	sign(c.cfg.Secret, "n0", c.cfg.NodeID, req)
	resp, err := c.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	ph.Wait()
	keys := store.Keys(func(string) bool { return true })
	t.Logf("origin said %q; peer stored keys %v", body, keys)
	// A plain-http client of the peer:
	w := httptest.NewRecorder()
	ph.ServeHTTP(w, httptest.NewRequest("GET", "http://h/p/1", nil))
	t.Logf("plain http client of the peer got %q (X-Cache %q)", w.Body.String(), w.Header().Get("X-Cache"))
	for _, k := range keys {
		if strings.HasPrefix(k, "http://") {
			t.Errorf("https response stored under %q with cache.key_scheme on", k)
		}
	}
}
