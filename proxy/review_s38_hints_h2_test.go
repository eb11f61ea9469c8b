package proxy

import (
	"bytes"
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/edgecache/edge/origin"
)

// s38HintsProxy is earlyHintsProxy over any origin handler, with the
// config mod may change, served on a real socket (HTTP/1.1, or HTTP/2 with
// TLS when tlsFront).
func s38HintsProxy(t *testing.T, up http.Handler, mod func(*Config), tlsFront bool) (*Handler, *httptest.Server) {
	t.Helper()
	us := httptest.NewServer(up)
	t.Cleanup(us.Close)
	oc, err := origin.NewClient(origin.ClientConfig{URL: us.URL, ConnectTimeout: 5 * time.Second, ResponseTimeout: 30 * time.Second, MaxIdleConns: 4, IdleConnTimeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	if mod != nil {
		mod(&cfg)
	}
	store := NewStore(64<<20, 8)
	h := New(cfg, store, FetcherFunc(oc.Fetch), NewMetrics(prometheus.NewRegistry(), store), nil)
	front := httptest.NewUnstartedServer(h)
	if tlsFront {
		front.EnableHTTP2 = true
		front.StartTLS()
	} else {
		front.Start()
	}
	t.Cleanup(front.Close)
	return h, front
}

// TestS38HintRelayToAStalledLeaderHoldsEveryJoiner: the relay writes the
// 103 to the leader's connection on the origin transport's goroutine, the
// one that must go on to read the final answer every joiner of the
// collapsed fetch waits for. A leader whose connection is not being read
// (its TCP window full: here, a large answer on another stream of the
// same HTTP/2 connection it does not read) blocks that write, and with it
// the shared fill: other users' requests wait on one client's socket
// (until a write timeout ends that connection; this test server has none).
func TestS38HintRelayToAStalledLeaderHoldsEveryJoiner(t *testing.T) {
	// The control: the same stalled leader, an origin that sends no 103.
	t.Run("no 103 (control)", func(t *testing.T) { s38StalledLeader(t, false) })
	t.Run("103", func(t *testing.T) { s38StalledLeader(t, true) })
}

func s38StalledLeader(t *testing.T, hint bool) {
	release := make(chan struct{})
	var sharedCalls atomic.Int64
	big := bytes.Repeat([]byte("x"), 1<<20)
	up := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/big":
			w.Header().Set("Cache-Control", "no-store")
			for range 48 {
				if _, err := w.Write(big); err != nil {
					return
				}
			}
		case "/shared":
			sharedCalls.Add(1)
			if hint {
				w.Header().Set("Link", "</leader.css>; rel=preload; as=style")
				w.WriteHeader(http.StatusEarlyHints)
				w.Header().Del("Link")
			}
			select {
			case <-release:
			case <-r.Context().Done():
				return
			}
			w.Header().Set("Cache-Control", "max-age=600")
			_, _ = io.WriteString(w, "shared page")
		}
	})
	h, front := s38HintsProxy(t, up, nil, true)

	// The leader: an HTTP/2 connection with a tiny receive buffer and a
	// huge flow-control window, which asks for /big and then /shared and
	// reads nothing after the handshake.
	d := &net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
		return c.Control(func(fd uintptr) { _ = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) })
	}}
	raw, err := d.Dial("tcp", front.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	conn := tls.Client(raw, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"h2"}}) //nolint:gosec // test server
	defer conn.Close()
	if err := conn.Handshake(); err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(conn, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(conn, conn)
	_ = fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1 << 30})
	_ = fr.WriteWindowUpdate(0, 1<<30)
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatal(err)
		}
		if s, ok := f.(*http2.SettingsFrame); ok && !s.IsAck() {
			_ = fr.WriteSettingsAck()
			break
		}
	}
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	get := func(id uint32, path string) {
		hb.Reset()
		for _, f := range [][2]string{{":method", "GET"}, {":scheme", "https"}, {":authority", "example.com"}, {":path", path}} {
			_ = enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
		}
		if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: hb.Bytes(), EndStream: true, EndHeaders: true}); err != nil {
			t.Fatal(err)
		}
	}
	get(1, "/big")
	time.Sleep(500 * time.Millisecond) // the edge fills the socket with /big
	get(3, "/shared")
	waitUntil(t, "the leader's fetch is at the origin", func() bool { return sharedCalls.Load() == 1 })
	time.Sleep(200 * time.Millisecond) // its 103 reaches the edge

	// Another user asks for the same page: it joins the leader's fetch.
	joiner := &http.Client{Timeout: 2500 * time.Millisecond, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // test server
	type answer struct {
		code int
		body string
		err  error
	}
	done := make(chan answer, 1)
	start := time.Now()
	go func() {
		req, _ := http.NewRequestWithContext(context.Background(), "GET", front.URL+"/shared", nil)
		req.Host = "example.com"
		resp, err := joiner.Do(req)
		if err != nil {
			done <- answer{err: err}
			return
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		done <- answer{code: resp.StatusCode, body: string(b)}
	}()
	waitUntil(t, "the joiner is in", func() bool { return testutil.ToFloat64(h.metrics.InFlight) == 3 })
	close(release) // the origin answers at once
	a := <-done
	took := time.Since(start)
	if a.err != nil || a.code != 200 || a.body != "shared page" {
		t.Fatalf("another user's request for /shared, which joined the fetch a stalled client led, got %d %q, %v after %v, though the origin had answered: "+
			"the 103 relay (origin transport goroutine) is blocked writing to the leader's unread connection, so the shared fill never got the final answer", a.code, a.body, a.err, took.Round(time.Millisecond))
	}
	if n := sharedCalls.Load(); n != 1 {
		t.Fatalf("origin asked %d times for /shared, want 1 (the joiner shares the fetch)", n)
	}
}
