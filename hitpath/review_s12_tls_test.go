package hitpath

// Review s12: the stop's deadline over TLS (the hit loop's raw conn is a
// *tls.Conn): abandonWrites' Close must end a write a stalled or slow
// reader blocks, at once, for many connections.

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"
)

func s12TLSServe(t *testing.T, cfg Config) (*http.Server, *Listener, string) {
	t.Helper()
	// httptest's certificate, without its server.
	ts := httptest.NewUnstartedServer(nil)
	ts.StartTLS()
	conf := ts.TLS.Clone()
	ts.Close()
	conf.NextProtos = []string{"http/1.1"}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := NewListener(tls.NewListener(ln, conf), cfg, s12Cache{}, NewMetrics(nil))
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "net")
	}), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = l.Serve(srv) }()
	t.Cleanup(func() { _ = srv.Close() })
	return srv, l, ln.Addr().String()
}

// s12TLSIdleThenHuge dials, has net/http answer a request (so that it sees
// the connection idle and closes it at Shutdown) and asks for /huge.
func s12TLSIdleThenHuge(t *testing.T, addr string) *tls.Conn {
	c, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"http/1.1"}}) //nolint:gosec // test
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if _, err := io.WriteString(c, "GET /miss HTTP/1.1\r\nHost: h\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(3 * time.Second))
	buf := make([]byte, 4096)
	if _, err := c.Read(buf); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Time{})
	if _, err := io.WriteString(c, "GET /huge HTTP/1.1\r\nHost: h\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	return c
}

// TestS12TLSStopDeadlineEndsStalledAndSlowWrites: 1 stalled and 24 slow
// readers (small reads, so that the writer often sits between chunks on a
// full socket, where tls.Conn.Close sends close_notify with a 5 s
// deadline, under Listener.mu). WaitWrites must return at the deadline
// and every write end within a moment.
func TestS12TLSStopDeadlineEndsStalledAndSlowWrites(t *testing.T) {
	t.Parallel() // timers and sockets: they wait, side by side
	srv, l, addr := s12TLSServe(t, Config{WriteTimeout: 20 * time.Second, IdleTimeout: time.Minute, ReadHeaderTimeout: 5 * time.Second})
	var wg sync.WaitGroup
	stop := make(chan struct{})
	defer func() { close(stop); wg.Wait() }()
	_ = s12TLSIdleThenHuge(t, addr) // stalled
	for range 24 {
		c := s12TLSIdleThenHuge(t, addr)
		wg.Go(func() {
			b := make([]byte, 2048)
			for {
				select {
				case <-stop:
					return
				default:
				}
				_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
				if _, err := c.Read(b); err != nil {
					return
				}
				time.Sleep(200 * time.Microsecond)
			}
		})
	}
	for deadline := time.Now().Add(3 * time.Second); l.writing.Load() < 25; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("only %d hits being written", l.writing.Load())
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	l.Drain()
	_ = srv.Shutdown(ctx)
	_ = l.WaitWrites(ctx)
	end, _ := ctx.Deadline()
	if d := time.Since(end); d > 300*time.Millisecond {
		t.Errorf("WaitWrites returned %v after the deadline", d)
	}
	for deadline := time.Now().Add(time.Second); l.writing.Load() != 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d hits still being written 1 s after the deadline", l.writing.Load())
		}
	}
}
