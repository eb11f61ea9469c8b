package node

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// A review found (now mended: proxy's chargeClientFor) a single client
// holding every limits.max_inflight slot despite
// limits.max_inflight_per_client, by abandoning misses once their response
// had started; every other client's misses were then refused 503.
//
// Steps: a node with limits {max_inflight: 4, max_inflight_per_client: 1};
// an origin that sends the head and the first KiB of a cacheable 256 KiB
// body at once and the rest slowly (as a large object from a far origin).
// One client (127.0.0.1) asks four distinct such URLs one after another,
// reads each response's head and closes the connection (the same as an
// HTTP/2 client resetting the stream once its HEADERS came). Then another
// client (127.0.0.2) asks for an unrelated page the origin answers at once.
//
// Was: each abandoned fill kept pumping (a storable body is fetched whole
// with no reader left) and kept its upstream slot until the origin ended
// the body, while the client's per-client slot went back when its request
// ended: 503 for the other client. Now a fill its request left counts
// against that client until its body ends, with an allowance of the bound:
// the first client's third and fourth misses are refused 429 while two of
// its fills run, the origin sees two big fetches, and the other client's
// miss is answered 200.
func TestS32DosAbandonedFillsTakeEveryUpstreamSlot(t *testing.T) {
	release := make(chan struct{})
	var started atomic.Int64
	o := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=600")
		if !strings.HasPrefix(r.URL.Path, "/big/") {
			_, _ = w.Write([]byte("victim page"))
			return
		}
		started.Add(1)
		const size = 256 << 10
		w.Header().Set("Content-Length", fmt.Sprint(size))
		w.WriteHeader(200)
		_, _ = w.Write(make([]byte, 1024))
		w.(http.Flusher).Flush()
		select { // the rest of the body is slow to come
		case <-release:
		case <-r.Context().Done():
		case <-time.After(60 * time.Second):
		}
	}))
	t.Cleanup(o.Close)
	site := "sites:\n" + s7Site("shop", []string{"shop.test"}, []string{o.URL}, "")
	n := startS7Node(t, "limits: {max_inflight: 4, max_inflight_per_client: 1}\n"+site)
	t.Cleanup(func() { close(release) }) // before the node stops (cleanups run last first)

	ask := func(local, path string, readAll bool) (int, error) {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(local)}, Timeout: 5 * time.Second}
		c, err := d.Dial("tcp", n.pub)
		if err != nil {
			return 0, err
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(20 * time.Second))
		if _, err := fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: shop.test\r\n\r\n", path); err != nil {
			return 0, err
		}
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			return 0, err
		}
		if readAll {
			var b [4096]byte
			for {
				if _, err := resp.Body.Read(b[:]); err != nil {
					break
				}
			}
		}
		return resp.StatusCode, nil // closing now abandons the rest of the body
	}

	for i := range 2 {
		// The fills the client left have an allowance of the bound (1):
		// a second fetch is allowed with one left fill running.
		// (Retried while 429: the request before may take a moment to end
		// once its client has gone.)
		if code, err := s32dRetry429(func() (int, error) { return ask("127.0.0.1", fmt.Sprintf("/big/%d", i), false) }); err != nil || code != 200 {
			t.Fatalf("attacker request %d: %d %v", i, code, err)
		}
	}
	for i := 2; i < 4; i++ {
		// Two fills it left run on: past the allowance.
		code, err := ask("127.0.0.1", fmt.Sprintf("/big/%d", i), false)
		if err != nil || code != http.StatusTooManyRequests {
			t.Fatalf("attacker request %d while its abandoned fills run: %d %v, want 429", i, code, err)
		}
	}
	if s := started.Load(); s != 2 {
		t.Fatalf("origin saw %d big fetches, want 2", s)
	}
	time.Sleep(500 * time.Millisecond) // the attacker's requests have ended
	code, err := ask("127.0.0.2", "/victim", true)
	if err != nil {
		t.Fatal(err)
	}
	if code != 200 {
		t.Errorf("another client's miss, while one client (max_inflight_per_client 1) had abandoned 4 responses: %d, want 200", code)
	}
}

// s32dRetry429 repeats f while it answers 429 (the previous request's
// per-client slot may take a moment to be given back), for up to 10 s.
func s32dRetry429(f func() (int, error)) (int, error) {
	deadline := time.Now().Add(10 * time.Second)
	for {
		code, err := f()
		if err != nil || code != http.StatusTooManyRequests || time.Now().After(deadline) {
			return code, err
		}
		time.Sleep(50 * time.Millisecond)
	}
}
