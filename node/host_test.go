package node

import (
	"bufio"
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edgecache/edge/config"
)

// rawAsk writes head on a new connection and reads one response: requests
// that a Go client would not send as written.
func rawAsk(t testing.TB, addr, head string) (*http.Response, string) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, head); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// startNodeYAML runs a node from a whole config file until the test ends.
func startNodeYAML(t testing.TB, yaml string) *Node {
	t.Helper()
	n, _ := runNodeYAML(t, yaml)
	return n
}

// runNodeYAML runs a node from a whole config file; stop ends its Run and
// waits for it (once: the test's end calls it too).
func runNodeYAML(t testing.TB, yaml string) (n *Node, stop func()) {
	t.Helper()
	cfg, err := config.LoadBytes([]byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	n, err = New(cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- n.Run(ctx) }()
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); <-done }) }
	t.Cleanup(stop)
	return n, stop
}

// TestEverySpellingOfAHostIsOneKey: the spellings site lookup accepts
// (case, a trailing dot, a port) reach one cache entry, which a purge of
// the plain URL removes; what is not a host (brackets around a name, a
// non-numeric port) is refused with 400 instead of reaching the site under
// a key of its own. The node's hit path is on, so both paths are held.
func TestEverySpellingOfAHostIsOneKey(t *testing.T) {
	var calls atomic.Int64
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		w.Header().Set("Cache-Control", "max-age=600")
		_, _ = io.WriteString(w, "v1 for "+r.Header.Get("X-Forwarded-Host"))
	}))
	defer origin.Close()
	n := startNodeYAML(t, "listen: '"+freeAddr(t)+"'\nadmin: {listen: '"+freeAddr(t)+"', token: tok}\n"+
		"sites:\n  - name: shop\n    hosts: [shop.test]\n    origins: ['"+origin.URL+"']\n")
	ask := func(host string) (int, string) {
		t.Helper()
		resp, body := rawAsk(t, n.PublicAddr(), "GET /p HTTP/1.1\r\nHost: "+host+"\r\nConnection: close\r\n\r\n")
		return resp.StatusCode, body
	}
	spellings := []string{"shop.test", "SHOP.test", "shop.test.", "shop.test:8080", "Shop.Test.:80"}
	for _, h := range spellings {
		if code, body := ask(h); code != 200 || body != "v1 for shop.test" {
			t.Fatalf("Host %q: %d %q", h, code, body)
		}
	}
	if calls.Load() != 1 {
		t.Fatalf("%d origin requests for one page under %d spellings, want 1", calls.Load(), len(spellings))
	}
	for _, h := range []string{"[shop.test]", "shop.test:x", "shop.test:99999", "shop..test"} {
		if code, _ := ask(h); code != http.StatusBadRequest {
			t.Errorf("Host %q: %d, want 400", h, code)
		}
	}
	req, _ := http.NewRequest("POST", "http://"+n.AdminAddr()+"/purge?url=http://shop.test/p", nil)
	req.Header.Set("Authorization", "Bearer tok")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(b), `"purged":1`) {
		t.Fatalf("purge: %s", b)
	}
	for _, h := range spellings {
		ask(h)
	}
	if calls.Load() != 2 {
		t.Fatalf("after the purge: %d origin requests, want 2 (one refetch shared by every spelling)", calls.Load())
	}
}
