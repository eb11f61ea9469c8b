package proxy

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// TestS14ClientCannotLookRelayed: with max_inflight_per_client 1 and one
// request of a client held at the origin, a second request from the same
// client that carries every field the peer protocol uses (Edge-*
// fields, Via, X-Forwarded-*, Forwarded) is still held to the bound
// (429): only Inbound.Relayed, which nothing but the cluster's
// authenticated PeerHandler sets, skips it; a relayed request (as the
// PeerHandler hands it over) from the same address is not bounded.
// HOLDS.
func TestS14ClientCannotLookRelayed(t *testing.T) {
	release := make(chan struct{})
	entered := make(chan struct{}, 4)
	h, _ := handlerProxy(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/hold" {
			entered <- struct{}{}
			<-release
		}
		w.Header().Set("Cache-Control", "no-store")
		_, _ = w.Write([]byte("ok"))
	}, func(c *Config) { c.MaxInflightPerClient = 1 })
	const remote = "192.0.2.7:5000"
	held := make(chan int, 1)
	go func() {
		r := httptest.NewRequest("GET", "http://a.test/hold", nil)
		r.RemoteAddr = remote
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		held <- w.Code
	}()
	select {
	case <-entered:
	case <-time.After(4 * time.Second):
		t.Fatal("the held request never reached the origin")
	}
	r := httptest.NewRequest("GET", "http://a.test/x", nil)
	r.RemoteAddr = "192.0.2.7:5001"
	for k, v := range map[string]string{
		"Edge-Route": "1", "Edge-Node": "peer-1", "Edge-Nonce": "abc", "Edge-Mac": "deadbeef", "Edge-Key-Version": CacheKeyVersion,
		"Edge-Site": "shop", "Via": "1.1 peer-1", "X-Forwarded-For": "198.51.100.1", "X-Forwarded-Proto": "https", "Forwarded": "for=198.51.100.1",
	} {
		r.Header.Set(k, v)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	if w.Code != http.StatusTooManyRequests {
		t.Errorf("a client's request dressed as a peer's: %d, want 429 (it skipped the per-client bound)", w.Code)
	}
	r = httptest.NewRequest("GET", "http://a.test/x", nil)
	r.RemoteAddr = "192.0.2.7:5002"
	w = httptest.NewRecorder()
	h.ServeInbound(w, r, Inbound{Relayed: true})
	if w.Code != http.StatusOK {
		t.Errorf("a relayed request from the client's address: %d, want 200 (not bounded)", w.Code)
	}
	close(release)
	if code := <-held; code != http.StatusOK {
		t.Fatalf("the held request: %d", code)
	}
	h.Wait()
}
