package node

// Review s12: a stop with a shutdown_timeout under net/http's 5 s rule for
// new connections, and a stalled reader of a large hit on a connection
// that only ever had hits.

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/edgecache/edge/config"
)

const s12Big = 40 << 20

func s12Origin(t *testing.T) *httptest.Server {
	big := bytes.Repeat([]byte("0123456789abcdef"), s12Big/16)
	o := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=600")
		w.Header().Set("Content-Type", "application/octet-stream")
		_, _ = w.Write(big)
	}))
	t.Cleanup(o.Close)
	return o
}

// TestS12StopEndsStalledHitOnNewConnection: shutdown_timeout 1 s; a plain
// and an HTTPS client each ask for a 40 MiB hit on a fresh connection and
// stop reading. Run returns at the deadline, but the hits go on being
// written afterwards: a client that resumes reading gets the whole body
// from a node that has "stopped".
func TestS12StopEndsStalledHitOnNewConnection(t *testing.T) {
	origin := s12Origin(t)
	hitPathModes(t, func(t *testing.T, on bool) {
		t.Parallel()
		cp, kp := writePair(t, t.TempDir(), "a", []string{"a.test"}, 1)
		yaml := "origin: {url: '" + origin.URL + "'}\nlisten: '" + freeAddr(t) + "'\nadmin: {listen: '" + freeAddr(t) + "'}\n" +
			"tls: {listen: '127.0.0.1:0', cert_file: '" + cp + "', key_file: '" + kp + "'}\n" +
			"cache: {slice_bytes: 0, max_object_bytes: 64MiB}\n" + hitPathYAML(on) +
			"shutdown_timeout: 1s\nlimits: {write_timeout: 20s}\n"
		cfg, err := config.LoadBytes([]byte(yaml))
		if err != nil {
			t.Fatal(err)
		}
		n, err := New(cfg, slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { _ = n.Run(ctx); close(done) }()
		defer func() { cancel(); <-done }()
		time.Sleep(100 * time.Millisecond)
		s11tlsWarm(t, n, "/big")
		s11tlsWarm(t, n, "/big")
		plain, err := net.Dial("tcp", n.pubLn.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer plain.Close()
		tc, err := s11tlsDial(n.tls.ln.Addr().String(), "a.test")
		if err != nil {
			t.Fatal(err)
		}
		defer tc.Close()
		conns := map[string]net.Conn{"plain": plain, "https": tc}
		for _, c := range conns {
			if _, err := io.WriteString(c, "GET /big HTTP/1.1\r\nHost: a.test\r\n\r\n"); err != nil {
				t.Fatal(err)
			}
		}
		time.Sleep(300 * time.Millisecond) // the sockets fill
		stopAt := time.Now()
		cancel()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Fatal("Run did not return 5 s after a stop with shutdown_timeout 1 s")
		}
		t.Logf("Run returned %v after the stop", time.Since(stopAt))
		time.Sleep(500 * time.Millisecond)
		for name, c := range conns {
			_ = c.SetReadDeadline(time.Now().Add(3 * time.Second))
			got, _ := io.Copy(io.Discard, c)
			if got > s12Big {
				t.Errorf("%s: the client got the whole %d MiB hit (%d bytes) after Run returned: its write outlived the stop's deadline", name, s12Big>>20, got)
			}
		}
	})
}
