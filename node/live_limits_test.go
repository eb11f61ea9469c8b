package node

import (
	"bufio"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestAReloadChangesTheLimits: limits.max_inflight,
// limits.max_inflight_per_client and limits.max_connections_per_client
// are applied by a reload (an operator tightens them under a flood
// without the restart that would empty the cache), and loosened again.
// Before, a reload that changed them was refused as frozen.
func TestAReloadChangesTheLimits(t *testing.T) {
	release := make(chan struct{})
	entered := make(chan struct{}, 16)
	o := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/slow") {
			entered <- struct{}{}
			<-release
		}
		w.Header().Set("Cache-Control", "no-store")
		_, _ = w.Write([]byte("ok"))
	}))
	t.Cleanup(o.Close)
	t.Cleanup(func() { close(release) })
	site := "sites:\n" + s7Site("shop", []string{"shop.test"}, []string{o.URL}, "")
	n := startS7Node(t, site)

	// slow holds one request in flight (at the origin) until release.
	slow := func(path string) chan int {
		done := make(chan int, 1)
		go func() {
			resp, _ := rawAskNoFatal(n.pub, "GET "+path+" HTTP/1.1\r\nHost: shop.test\r\nConnection: close\r\n\r\n")
			done <- resp
		}()
		select {
		case <-entered:
		case <-time.After(10 * time.Second):
			t.Fatalf("%s never reached the origin", path)
		}
		return done
	}
	reload := func(limits string) {
		t.Helper()
		if code, body := n.reload(limits + site); code != 200 {
			t.Fatalf("reload with %q: %d %s", limits, code, body)
		}
	}

	reload("limits: {max_inflight_per_client: 1}\n")
	first := slow("/slow-a")
	if code, _ := n.get("shop.test", "/fast"); code != http.StatusTooManyRequests {
		t.Errorf("a second request in flight from the client after max_inflight_per_client 1: %d, want 429", code)
	}
	reload("")
	if code, _ := n.get("shop.test", "/fast"); code != 200 {
		t.Errorf("the same after the limit was lifted: %d, want 200", code)
	}

	reload("limits: {max_inflight: 1}\n")
	if code, _ := n.get("shop.test", "/fast"); code != http.StatusServiceUnavailable {
		t.Errorf("a second miss while one holds the node's only upstream slot: %d, want 503", code)
	}
	reload("")
	if code, _ := n.get("shop.test", "/fast"); code != 200 {
		t.Errorf("the same after max_inflight went back: %d, want 200", code)
	}

	// The slow request's connection is one; with a bound of 2, one more
	// is let in and the next is closed unanswered.
	reload("limits: {max_connections_per_client: 2}\n")
	held, err := net.Dial("tcp", n.pub)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	if got := answered(t, n.pub); got {
		t.Errorf("a third connection from the client after max_connections_per_client 2 was answered")
	}
	reload("")
	if got := answered(t, n.pub); !got {
		t.Errorf("a third connection after the bound was lifted was not answered")
	}
	release <- struct{}{}
	if code := <-first; code != 200 {
		t.Errorf("the request in flight through the reloads: %d, want 200", code)
	}
}

// answered reports whether a new connection to addr gets an answer to a
// request.
func answered(t *testing.T, addr string) bool {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return false
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write([]byte("GET /fast HTTP/1.1\r\nHost: shop.test\r\nConnection: close\r\n\r\n")); err != nil {
		return false
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return true
}

// rawAskNoFatal is rawAsk for a goroutine: the status, or 0.
func rawAskNoFatal(addr, req string) (int, error) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := c.Write([]byte(req)); err != nil {
		return 0, err
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}

// untilStopped runs each(w, i) on n workers, i counting a worker's
// rounds, until the stop it returns is called; stop waits for them.
func untilStopped(n int, each func(w, i int)) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	for w := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-done:
					return
				default:
				}
				each(w, i)
			}
		}()
	}
	return func() { close(done); wg.Wait() }
}
