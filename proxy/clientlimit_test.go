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
