package node

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// s30ConnOrigin is an origin that counts its open connections and can be
// slowed down.
type s30ConnOrigin struct {
	*httptest.Server
	name  string
	delay atomic.Int64 // ns
	calls atomic.Int64
	mu    sync.Mutex
	open  map[net.Conn]bool
}

func newS30ConnOrigin(t *testing.T, name string) *s30ConnOrigin {
	o := &s30ConnOrigin{name: name, open: map[net.Conn]bool{}}
	o.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		o.calls.Add(1)
		time.Sleep(time.Duration(o.delay.Load()))
		w.Header().Set("Cache-Control", "no-store")
		_, _ = io.WriteString(w, "origin="+o.name)
	}))
	o.Config.ConnState = func(c net.Conn, s http.ConnState) {
		o.mu.Lock()
		defer o.mu.Unlock()
		switch s {
		case http.StateNew:
			o.open[c] = true
		case http.StateClosed, http.StateHijacked:
			delete(o.open, c)
		}
	}
	o.Start()
	t.Cleanup(o.Close)
	return o
}

func (o *s30ConnOrigin) conns() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.open)
}

// TestS30OriginReloadFinishesInFlightAndStopsUsingARemovedOrigin: a
// reload that removes origin O1 while a request is on it lets that
// request finish (200 from O1), and no request after the reload reaches
// O1.
func TestS30OriginReloadFinishesInFlightAndStopsUsingARemovedOrigin(t *testing.T) {
	o1, o2 := newS30ConnOrigin(t, "O1"), newS30ConnOrigin(t, "O2")
	o1.delay.Store(int64(800 * time.Millisecond))
	n := startS7Node(t, "sites:\n"+s7Site("shop", []string{"shop.test"}, []string{o1.URL}, ""))
	done := make(chan string, 1)
	go func() {
		code, body := n.get("shop.test", "/slow")
		done <- fmt.Sprint(code, " ", body)
	}()
	time.Sleep(200 * time.Millisecond)
	if code, b := n.reload("sites:\n" + s7Site("shop", []string{"shop.test"}, []string{o2.URL}, "")); code != 200 {
		t.Fatalf("reload: %d %s", code, b)
	}
	before := o1.calls.Load()
	for i := range 10 {
		if code, body := n.get("shop.test", fmt.Sprintf("/after/%d", i)); code != 200 || body != "origin=O2" {
			t.Errorf("after the reload: %d %q", code, body)
		}
	}
	if got := <-done; got != "200 origin=O1" {
		t.Errorf("the request in flight across the reload: %q", got)
	}
	if d := o1.calls.Load() - before; d != 0 {
		t.Errorf("the removed origin got %d requests after the reload", d)
	}
}

// TestS30OriginReloadClosesTheOldPoolsConnectionsOnceTheirRequestsEnd: a
// request in flight on a pool a reload replaced (its origin removed)
// finishes, and its connection is closed when it is put back (net/http's
// CloseIdleConnections marks the transport so), not kept idle for
// origin.idle_timeout.
func TestS30OriginReloadClosesTheOldPoolsConnectionsOnceTheirRequestsEnd(t *testing.T) {
	o1, o2 := newS30ConnOrigin(t, "O1"), newS30ConnOrigin(t, "O2")
	o1.delay.Store(int64(800 * time.Millisecond))
	n := startS7Node(t, "sites:\n"+s7Site("shop", []string{"shop.test"}, []string{o1.URL}, ""))
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n.get("shop.test", fmt.Sprintf("/slow/%d", i))
		}()
	}
	time.Sleep(200 * time.Millisecond)
	if code, b := n.reload("sites:\n" + s7Site("shop", []string{"shop.test"}, []string{o2.URL}, "")); code != 200 {
		t.Fatalf("reload: %d %s", code, b)
	}
	wg.Wait()
	time.Sleep(1500 * time.Millisecond)
	if k := o1.conns(); k != 0 {
		t.Fatalf("%d connections to the origin the reload removed are still open 1.5 s after their requests ended", k)
	}
}
