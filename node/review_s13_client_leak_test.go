package node

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// s13WaitOK polls until a GET from 127.0.0.1 is answered 200 (a leaked
// per-client slot at max_inflight_per_client 1 would make it 429 for
// ever), and the connection bound has nothing open but what is asked.
func s13WaitOK(t *testing.T, n *Node, get func() int) {
	t.Helper()
	var code int
	for end := time.Now().Add(3 * time.Second); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		if code = get(); code == http.StatusOK {
			return
		}
	}
	t.Fatalf("127.0.0.1 still refused (%d) once every request ended: a per-client slot leaked", code)
}

// TestS13ClientNoSlotLeaksOnTheHitPaths checked (holds): with
// max_inflight_per_client 1 and max_connections_per_client 3, over
// 127.0.0.1 with the HTTP/1.1 hit path and the node's HTTP/2 server:
// pipelined GET/HEAD hits, small and large, mixed with misses and
// requests the hit path declines; a large hit whose client closes
// without reading; HTTP/2 streams whose bodies wait for the window, on a
// connection then dropped — afterwards the client is served (no slot
// kept) and the connection bound counts nothing open.
func TestS13ClientNoSlotLeaksOnTheHitPaths(t *testing.T) {
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=600")
		switch r.URL.Path {
		case "/big":
			_, _ = io.WriteString(w, strings.Repeat("b", 600<<10))
		case "/nostore":
			w.Header().Set("Cache-Control", "no-store")
			_, _ = io.WriteString(w, "fresh")
		case "/vary":
			w.Header().Set("Vary", "Cookie")
			_, _ = io.WriteString(w, "v")
		default:
			_, _ = io.WriteString(w, "small")
		}
	}))
	t.Cleanup(origin.Close)
	cp, kp := writePair(t, t.TempDir(), "a", []string{"a.test"}, 1)
	n := startNode(t, origin.URL, "tuning: {hit_path: true, http2_server: edge}\n"+
		"limits: {max_inflight_per_client: 1, max_connections_per_client: 3}\n"+
		"tls: {listen: '"+freeAddr(t)+"', cert_file: '"+cp+"', key_file: '"+kp+"'}\n")
	plain := func() int {
		c, err := net.DialTimeout("tcp", n.PublicAddr(), 2*time.Second)
		if err != nil {
			return 0
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(2 * time.Second))
		_, _ = io.WriteString(c, "GET /small HTTP/1.1\r\nHost: a.test\r\nConnection: close\r\n\r\n")
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			return 0
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		return resp.StatusCode
	}
	for _, p := range []string{"/small", "/big", "/vary"} { // stored
		c, err := net.Dial("tcp", n.PublicAddr())
		if err != nil {
			t.Fatal(err)
		}
		_ = c.SetDeadline(time.Now().Add(2 * time.Second))
		_, _ = io.WriteString(c, "GET "+p+" HTTP/1.1\r\nHost: a.test\r\nConnection: close\r\n\r\n")
		_, _ = io.Copy(io.Discard, c)
		c.Close()
	}
	n.Proxy().Wait()

	// Pipelined, read whole.
	c, err := net.Dial("tcp", n.PublicAddr())
	if err != nil {
		t.Fatal(err)
	}
	_ = c.SetDeadline(time.Now().Add(4 * time.Second))
	paths := []string{"GET /small", "HEAD /small", "GET /big", "HEAD /big", "GET /nostore", "GET /vary", "GET /small", "GET /missing?x", "HEAD /big", "GET /small"}
	var b strings.Builder
	for _, p := range paths {
		b.WriteString(p + " HTTP/1.1\r\nHost: a.test\r\n\r\n")
	}
	_, _ = io.WriteString(c, b.String())
	br := bufio.NewReader(c)
	for _, p := range paths {
		req, _ := http.NewRequest(strings.Fields(p)[0], "/", nil)
		resp, err := http.ReadResponse(br, req)
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		if resp.StatusCode == http.StatusTooManyRequests {
			t.Errorf("pipelined %s on one connection: 429 (a slot of an earlier one still held)", p)
		}
	}
	c.Close()
	// A large hit whose client goes away without reading.
	for range 3 {
		c, err := net.Dial("tcp", n.PublicAddr())
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.WriteString(c, "GET /big HTTP/1.1\r\nHost: a.test\r\n\r\nGET /big HTTP/1.1\r\nHost: a.test\r\n\r\n")
		_, _ = c.Read(make([]byte, 100))
		_ = c.(*net.TCPConn).SetLinger(0)
		c.Close()
	}
	s13WaitOK(t, n, plain)

	// HTTP/2: streams of a large hit wait for the window; the
	// connection is dropped mid-way.
	tlsAddr := n.tls.ln.Addr().String()
	h2 := func(ctx context.Context, tr *http.Transport, path string) int {
		req, _ := http.NewRequestWithContext(ctx, "GET", "https://"+tlsAddr+path, nil)
		req.Host = "a.test"
		resp, err := (&http.Client{Transport: tr, Timeout: 3 * time.Second}).Do(req)
		if err != nil {
			return 0
		}
		defer resp.Body.Close()
		if resp.ProtoMajor != 2 {
			t.Errorf("%s: %s, want HTTP/2", path, resp.Proto)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		return resp.StatusCode
	}
	newTr := func() *http.Transport {
		return &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true, ServerName: "a.test"}, //nolint:gosec // a test certificate
			ForceAttemptHTTP2: true, DisableCompression: true}
	}
	tr := newTr()
	h2(context.Background(), tr, "/big")
	h2(context.Background(), tr, "/big")
	if n.tls.h2.Stats().Hits == 0 {
		t.Fatal("the HTTP/2 server's hit path answered nothing: the test does not reach it")
	}
	var raw net.Conn
	var mu sync.Mutex
	trDrop := newTr()
	trDrop.DialTLSContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := (&tls.Dialer{Config: trDrop.TLSClientConfig}).DialContext(ctx, network, addr)
		mu.Lock()
		raw = c
		mu.Unlock()
		return c, err
	}
	trDrop.TLSClientConfig.NextProtos = []string{"h2"}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, _ := http.NewRequestWithContext(ctx, "GET", fmt.Sprintf("https://%s/big", tlsAddr), nil)
			req.Host = "a.test"
			resp, err := (&http.Client{Transport: trDrop}).Do(req)
			if err == nil {
				_, _ = resp.Body.Read(make([]byte, 10)) // then stop reading
				<-ctx.Done()
				resp.Body.Close()
			}
		}()
	}
	time.Sleep(300 * time.Millisecond)
	mu.Lock()
	if raw != nil {
		_ = raw.Close()
	}
	mu.Unlock()
	cancel()
	wg.Wait()
	trDrop.CloseIdleConnections()
	s13WaitOK(t, n, func() int { return h2(context.Background(), tr, "/small") })
	s13WaitOK(t, n, plain)
	tr.CloseIdleConnections()
	for end := time.Now().Add(3 * time.Second); n.conns.Open() != 0; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(end) {
			n.conns.mu.Lock()
			defer n.conns.mu.Unlock()
			t.Fatalf("connections still counted open after every client left: %d (%v)", n.conns.open, n.conns.byAddr)
		}
	}
}
