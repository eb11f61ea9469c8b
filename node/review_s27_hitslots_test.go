package node

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/net/http2"

	"github.com/edgecache/edge/proxy"
)

// s27ClientSlots reads proxy.Handler's per-client count (clients.n) by
// reflection: the map must be empty when nothing is in flight.
func s27ClientSlots(h *proxy.Handler) map[string]int {
	f := reflect.ValueOf(h).Elem().FieldByName("clients")
	c := reflect.NewAt(f.Type(), unsafe.Pointer(f.UnsafeAddr())).Elem()
	mu := c.FieldByName("mu")
	m := (*sync.Mutex)(unsafe.Pointer(mu.UnsafeAddr()))
	m.Lock()
	defer m.Unlock()
	nf := c.FieldByName("n")
	src := *(*map[string]int)(unsafe.Pointer(nf.UnsafeAddr()))
	out := map[string]int{}
	for k, v := range src {
		out[k] = v
	}
	return out
}

// HOLDS? With limits.max_inflight_per_client off, large hits (over
// copyBodyBytes, so AppendHit takes a slot since b298f53) on the plain
// hit path, TLS HTTP/1.1 and HTTP/2 (edge h2server), read whole, dropped
// mid-body and reset mid-stream, then a node stop with hits stalled:
// the clientLimiter map is empty after each phase.
func TestS27HitSlotsComeBackOnEveryFront(t *testing.T) {
	big := strings.Repeat("h", 512<<10)
	o := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=600")
		w.Header().Set("Content-Type", "application/octet-stream")
		_, _ = io.WriteString(w, big)
	}))
	t.Cleanup(o.Close)
	cp, kp := writePair(t, t.TempDir(), "a", []string{"a.test"}, 1)
	body := "tls: {listen: '127.0.0.1:0', cert_file: '" + cp + "', key_file: '" + kp + "'}\ntuning: {hit_path: true, http2_server: edge}\n" +
		"cache: {slice_bytes: 0}\nsites:\n" + s7Site("a", []string{"a.test"}, []string{o.URL}, "")
	n := startS7Node(t, body)
	tlsAddr := n.tls.ln.Addr().String()
	for i := 0; i < 4; i++ {
		for k := 0; k < 3; k++ {
			n.get("a.test", fmt.Sprintf("/big-%d", i))
		}
	}
	if code, _ := n.get("a.test", "/big-0"); code != 200 {
		t.Fatalf("warm: %d", code)
	}
	tcfg := func(proto string) *tls.Config {
		return &tls.Config{InsecureSkipVerify: true, ServerName: "a.test", NextProtos: []string{proto}} //nolint:gosec // test certificate
	}
	dropPlain := func(path string, read int) {
		c, err := net.Dial("tcp", n.pub)
		if err != nil {
			return
		}
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		_, _ = io.WriteString(c, "GET "+path+" HTTP/1.1\r\nHost: a.test\r\n\r\n")
		buf := make([]byte, read)
		_, _ = io.ReadFull(c, buf)
		c.Close()
	}
	dropTLS := func(path string, read int) {
		c, err := tls.Dial("tcp", tlsAddr, tcfg("http/1.1"))
		if err != nil {
			return
		}
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		_, _ = io.WriteString(c, "GET "+path+" HTTP/1.1\r\nHost: a.test\r\n\r\n")
		buf := make([]byte, read)
		_, _ = io.ReadFull(c, buf)
		c.Close()
	}
	h1 := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: tcfg("http/1.1"), DisableCompression: true}}
	h2c := &http.Client{Timeout: 5 * time.Second, Transport: &http2.Transport{TLSClientConfig: tcfg("h2"), DisableCompression: true}} //nolint:staticcheck // HTTP/2 alone
	full := func(c *http.Client, path string, read int) {
		req, _ := http.NewRequest("GET", "https://"+tlsAddr+path, nil)
		req.Host = "a.test"
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		req = req.WithContext(ctx)
		resp, err := c.Do(req)
		if err != nil {
			return
		}
		if read < 0 {
			_, _ = io.Copy(io.Discard, resp.Body)
		} else {
			_, _ = io.ReadFull(resp.Body, make([]byte, read))
			cancel() // h2: RST_STREAM mid-body
		}
		resp.Body.Close()
	}
	stop := untilStopped(8, func(w, i int) {
		p := fmt.Sprintf("/big-%d", (w+i)%4)
		switch (w + i) % 7 {
		case 0:
			dropPlain(p, 8<<10)
		case 1:
			_, _ = rawAskNoFatal(n.pub, "GET "+p+" HTTP/1.1\r\nHost: a.test\r\nConnection: close\r\n\r\n")
		case 2:
			dropTLS(p, 8<<10)
		case 3:
			full(h1, p, -1)
		case 4:
			full(h2c, p, -1)
		case 5:
			full(h2c, p, 16<<10)
		case 6:
			dropPlain(p, 0)
		}
	})
	time.Sleep(3 * time.Second)
	stop()
	h2c.CloseIdleConnections()
	h1.CloseIdleConnections()
	_, m := n.admin("GET", "/metrics")
	if !strings.Contains(m, "edge_http2_streams_total{answered=\"hit\"}") || strings.Contains(m, "edge_http2_streams_total{answered=\"hit\"} 0\n") {
		t.Errorf("the HTTP/2 hit path was not taken: the test proves nothing for it")
	}
	left := s27SlotsLeft(n.proxy, 50)
	if len(left) != 0 {
		t.Errorf("after the load (plain, TLS, HTTP/2 hits, clients gone mid-body), bound off: clientLimiter holds %v, want empty", left)
	}
}

// The stop: hits stalled on every front (unread), the node stopped; the
// clientLimiter map is empty once Run returns.
func TestS27HitSlotsComeBackOnStop(t *testing.T) {
	big := strings.Repeat("s", 8<<20)
	o := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=600")
		_, _ = io.WriteString(w, big)
	}))
	t.Cleanup(o.Close)
	cp, kp := writePair(t, t.TempDir(), "a", []string{"a.test"}, 1)
	s := &s7Node{file: t.TempDir() + "/edge.yaml", pub: freeAddr(t), adm: freeAddr(t), t: t}
	s.write("tls: {listen: '127.0.0.1:0', cert_file: '" + cp + "', key_file: '" + kp + "'}\ntuning: {hit_path: true, http2_server: edge}\n" +
		"cache: {slice_bytes: 0, max_object_bytes: 16MiB}\nshutdown_timeout: 2s\nsites:\n" + s7Site("a", []string{"a.test"}, []string{o.URL}, ""))
	cfg, _, err := s.load()
	if err != nil {
		t.Fatal(err)
	}
	nd, err := New(cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	s.Node = nd
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- nd.Run(ctx) }()
	defer cancel()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if c, err := net.Dial("tcp", s.pub); err == nil {
			c.Close()
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	for k := 0; k < 3; k++ {
		s.get("a.test", "/big")
	}
	tlsAddr := nd.tls.ln.Addr().String()
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for i := 0; i < 2; i++ {
		c, err := net.Dial("tcp", s.pub)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.WriteString(c, "GET /big HTTP/1.1\r\nHost: a.test\r\n\r\n")
		conns = append(conns, c)
		tc, err := tls.Dial("tcp", tlsAddr, &tls.Config{InsecureSkipVerify: true, ServerName: "a.test", NextProtos: []string{"http/1.1"}}) //nolint:gosec // test
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.WriteString(tc, "GET /big HTTP/1.1\r\nHost: a.test\r\n\r\n")
		conns = append(conns, tc)
	}
	h2c := &http.Client{Transport: &http2.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true, ServerName: "a.test", NextProtos: []string{"h2"}}, DisableCompression: true}} //nolint:staticcheck,gosec // test
	req, _ := http.NewRequest("GET", "https://"+tlsAddr+"/big", nil)
	req.Host = "a.test"
	if resp, err := h2c.Do(req); err == nil {
		defer resp.Body.Close() // unread: the hit waits for the window
	}
	time.Sleep(300 * time.Millisecond)
	held := s27ClientSlots(nd.proxy)
	t.Logf("stalled hits hold %v", held)
	cancel()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("the node did not stop")
	}
	left := s27SlotsLeft(nd.proxy, 30)
	if len(left) != 0 {
		t.Errorf("after the stop with stalled hits on every front: clientLimiter holds %v, want empty", left)
	}
}

// s27SlotsLeft polls the per-client slots of p until none is held, at most
// tries times 100 ms, and returns what is left.
func s27SlotsLeft(p *proxy.Handler, tries int) map[string]int {
	var left map[string]int
	for try := 0; try < tries; try++ {
		if left = s27ClientSlots(p); len(left) == 0 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	return left
}
