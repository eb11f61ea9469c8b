package proxy

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// TestInflightPerClientCountsAnIPv6ClientByItsNetwork: with
// max_inflight_per_client 1, a request held at the origin takes the slot
// of its client; another address of the same /64 is the same client (429),
// while a neighbouring /64 and an IPv4 client are not, and the slot is
// back once the held request ends.
func TestInflightPerClientCountsAnIPv6ClientByItsNetwork(t *testing.T) {
	release := make(chan struct{})
	entered := make(chan struct{}, 8)
	h, _ := handlerProxy(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/hold" {
			entered <- struct{}{}
			<-release
		}
		w.Header().Set("Cache-Control", "no-store")
		_, _ = w.Write([]byte("ok"))
	}, func(c *Config) { c.MaxInflightPerClient = 1 })
	get := func(path, remote string) int {
		r := httptest.NewRequest("GET", "http://a.test"+path, nil)
		r.RemoteAddr = remote
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w.Code
	}
	held := make(chan int, 1)
	go func() { held <- get("/hold", "[2001:db8:5:6::1]:4000") }()
	select {
	case <-entered:
	case <-time.After(5 * time.Second):
		t.Fatal("the held request never reached the origin")
	}
	for _, c := range []struct {
		remote string
		want   int
	}{
		{"[2001:db8:5:6::1]:4001", http.StatusTooManyRequests},         // the same address
		{"[2001:db8:5:6:ffff:1:2:3]:4002", http.StatusTooManyRequests}, // another address of its /64
		{"[2001:db8:5:7::1]:4003", http.StatusOK},                      // the next /64
		{"192.0.2.9:4004", http.StatusOK},                              // an IPv4 client
		{"[::ffff:192.0.2.9]:4005", http.StatusOK},                     // the same IPv4 client, mapped
	} {
		if got := get("/x", c.remote); got != c.want {
			t.Errorf("from %s while [2001:db8:5:6::1] waits: %d, want %d", c.remote, got, c.want)
		}
	}
	// A client's request dressed as a peer's (every field the peer protocol
	// and forwarding use) is still held to the bound: only Inbound.Relayed,
	// which only the cluster's authenticated PeerHandler sets, skips it; a
	// relayed request from the same network is not bounded (a review's
	// TestS14ClientCannotLookRelayed, folded in here).
	dressed := httptest.NewRequest("GET", "http://a.test/x", nil)
	dressed.RemoteAddr = "[2001:db8:5:6::2]:4007"
	for k, v := range map[string]string{
		"Edge-Route": "1", "Edge-Node": "peer-1", "Edge-Nonce": "abc", "Edge-Mac": "deadbeef", "Edge-Key-Version": CacheKeyVersion,
		"Edge-Site": "shop", "Via": "1.1 peer-1", "X-Forwarded-For": "198.51.100.1", "X-Forwarded-Proto": "https", "Forwarded": "for=198.51.100.1",
	} {
		dressed.Header.Set(k, v)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, dressed)
	if w.Code != http.StatusTooManyRequests {
		t.Errorf("a client's request dressed as a peer's: %d, want 429 (it skipped the per-client bound)", w.Code)
	}
	relayed := httptest.NewRequest("GET", "http://a.test/x", nil)
	relayed.RemoteAddr = "[2001:db8:5:6::3]:7946"
	w = httptest.NewRecorder()
	h.ServeInbound(w, relayed, Inbound{Relayed: true})
	if w.Code != http.StatusOK {
		t.Errorf("a relayed request from the waiting client's /64: %d, want 200 (a peer's is not bounded)", w.Code)
	}
	close(release)
	if code := <-held; code != http.StatusOK {
		t.Fatalf("the held request: %d", code)
	}
	if got := get("/x", "[2001:db8:5:6::99]:4006"); got != http.StatusOK {
		t.Fatalf("the /64's slot not given back: %d", got)
	}
	h.clients.mu.Lock()
	defer h.clients.mu.Unlock()
	if len(h.clients.n) != 0 {
		t.Fatalf("slots still counted after every request ended: %v", h.clients.n)
	}
}
