package node

import (
	"context"
	"crypto/tls"
	"io"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/edgecache/edge/config"
)

// TestS11ConnStopLeavesNoSlot: a node that stops with connections of
// every kind held open (idle keep-alive plain, TLS HTTP/1.1, h2, h3, a
// partial head, a handshake never started) closes them all: nothing is
// counted once Run has returned.
func TestS11ConnStopLeavesNoSlot(t *testing.T) {
	origin := reviewOrigin(t)
	for _, mode := range []string{
		"tuning: {hit_path: true, http2_server: edge}",
		"tuning: {hit_path: false, http2_server: go}",
	} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			cp, kp := writePair(t, t.TempDir(), "a", []string{"a.test"}, 1)
			cfg, err := config.LoadBytes([]byte("origin: {url: '" + origin.URL + "'}\nlisten: '" + freeAddr(t) + "'\nadmin: {listen: '" + freeAddr(t) + "'}\n" +
				mode + "\nshutdown_timeout: 3s\nlimits: {read_header_timeout: 1s}\n" +
				"tls: {listen: '127.0.0.1:0', cert_file: '" + cp + "', key_file: '" + kp + "', http3: true}\n"))
			if err != nil {
				t.Fatal(err)
			}
			n, err := New(cfg, slog.New(slog.DiscardHandler))
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- n.Run(ctx) }()
			defer func() { cancel(); <-done }()
			time.Sleep(100 * time.Millisecond)
			var clients []*httpCloser
			for _, h2 := range []bool{false, true} {
				cl := s11TLSClient(h3Addr(n), h2)
				if r, err := cl.Get("https://a.test/a"); err == nil {
					_, _ = io.Copy(io.Discard, r.Body)
					r.Body.Close()
				} else {
					t.Fatal(err)
				}
				clients = append(clients, &httpCloser{cl.CloseIdleConnections})
			}
			h3 := h3Client(n)
			if r, err := h3.Get("https://a.test/a"); err == nil {
				_, _ = io.Copy(io.Discard, r.Body)
				r.Body.Close()
			} else {
				t.Fatal(err)
			}
			var raws []net.Conn
			for _, s := range []string{"GET /a HTTP/1.1\r\nHost: x\r\n\r\n", "GET /a HTTP/1.1\r\nHo", ""} {
				c, err := net.Dial("tcp", n.PublicAddr())
				if err != nil {
					t.Fatal(err)
				}
				_, _ = io.WriteString(c, s)
				raws = append(raws, c)
			}
			c, err := net.Dial("tcp", h3Addr(n))
			if err != nil {
				t.Fatal(err)
			}
			raws = append(raws, c)
			tc, err := tls.Dial("tcp", h3Addr(n), &tls.Config{InsecureSkipVerify: true, ServerName: "a.test", NextProtos: []string{"http/1.1"}}) //nolint:gosec // test
			if err != nil {
				t.Fatal(err)
			}
			raws = append(raws, tc)
			defer func() {
				for _, c := range raws {
					c.Close()
				}
				for _, c := range clients {
					c.f()
				}
			}()
			time.Sleep(200 * time.Millisecond)
			t.Logf("open before the stop: %d", n.conns.Open())
			cancel()
			select {
			case <-done:
			case <-time.After(5 * time.Second):
				t.Fatal("Run did not return")
			}
			done <- nil
			if got := n.conns.Open(); got != 0 {
				t.Errorf("after Run returned: %d connections still counted", got)
			}
		})
	}
}

type httpCloser struct{ f func() }
