package hitpath

// Review s12: a graceful stop's deadline (WaitWrites' context) must end
// every hit still being written, whatever state net/http saw the
// connection in.

import (
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// s12Huge is far more than loopback's socket buffers: a reader that
// stops holds the writer.
var s12Huge = []byte(strings.Repeat("0123456789abcdef", (48<<20)/16))

type s12Cache struct{}

func (s12Cache) AppendHit(dst []byte, r *Request, date []byte, _ net.Addr, a *Answer) bool {
	if string(r.Target) != "/huge" {
		return false
	}
	dst = append(dst, "HTTP/1.1 200 OK\r\nContent-Length: "...)
	dst = append(dst, []byte(itoa(len(s12Huge)))...)
	dst = append(dst, "\r\n\r\n"...)
	a.Head, a.Body = dst, s12Huge
	return true
}

func itoa(n int) string {
	if n == 0 {
		return "0"
	}
	var b []byte
	for ; n > 0; n /= 10 {
		b = append([]byte{byte('0' + n%10)}, b...)
	}
	return string(b)
}

func s12Serve(t *testing.T, cfg Config) (*http.Server, *Listener, string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := NewListener(ln, cfg, s12Cache{}, NewMetrics(nil))
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "net")
	}), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = l.Serve(srv) }()
	t.Cleanup(func() { _ = srv.Close() })
	return srv, l, ln.Addr().String()
}

// s12Stop is node.Run's stop of one listener with deadline d.
func s12Stop(srv *http.Server, l *Listener, d time.Duration) time.Duration {
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	l.Drain()
	_ = srv.Shutdown(ctx)
	_ = l.WaitWrites(ctx)
	return time.Since(start)
}

// s12HugeHit serves a listener with write_timeout 20 s and asks it for
// the huge page on a new connection (after a miss net/http answers, when
// afterMiss: net/http then sees the connection idle), returning the
// server, the listener and the client's connection.
func s12HugeHit(t *testing.T, afterMiss bool) (*http.Server, *Listener, net.Conn) {
	t.Helper()
	srv, l, addr := s12Serve(t, Config{WriteTimeout: 20 * time.Second, IdleTimeout: time.Minute, ReadHeaderTimeout: 5 * time.Second})
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if afterMiss {
		if _, err := io.WriteString(c, "GET /miss HTTP/1.1\r\nHost: h\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		_ = c.SetReadDeadline(time.Now().Add(3 * time.Second))
		if _, err := c.Read(make([]byte, 4096)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := io.WriteString(c, "GET /huge HTTP/1.1\r\nHost: h\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	return srv, l, c
}

func s12WaitWriting(t *testing.T, l *Listener) {
	t.Helper()
	for deadline := time.Now().Add(3 * time.Second); l.writing.Load() == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the hit was never being written")
		}
	}
}

// TestS12StopDeadlineEndsStalledWriteOnNewConnection: a connection that
// only ever had hits is StateNew to net/http, whose Shutdown closes it
// only once it is 5 s old. With a shutdown deadline under that (or a
// connection accepted less than 5 s before the deadline), net/http never
// calls Close, closeLat stays false, and abandonWrites leaves the write
// alone: it goes on past the stop's deadline (up to write_timeout per
// chunk; a client reading one chunk per write_timeout keeps it for ever).
func TestS12StopDeadlineEndsStalledWriteOnNewConnection(t *testing.T) {
	t.Parallel() // timers and sockets: they wait, side by side
	srv, l, c := s12HugeHit(t, false)
	s12WaitWriting(t, l)
	time.Sleep(100 * time.Millisecond) // the socket fills; the reader never reads
	took := s12Stop(srv, l, time.Second)
	t.Logf("stop took %v", took)
	time.Sleep(500 * time.Millisecond)
	if w := l.writing.Load(); w != 0 {
		t.Errorf("%d hit(s) still being written 0.5 s after the stop's 1 s deadline (write_timeout 20 s)", w)
	}
	// And the client, reading now, gets the whole body from the stopped
	// server.
	_ = c.SetReadDeadline(time.Now().Add(3 * time.Second))
	n, _ := io.Copy(io.Discard, c)
	if n >= int64(len(s12Huge)) {
		t.Errorf("the client read all %d bytes (%d) after the stop's deadline passed", len(s12Huge), n)
	}
}

// TestS12StopDeadlineEndsStalledWriteOnIdleConnection is the case the
// change covers (net/http closed the connection it saw idle): control.
func TestS12StopDeadlineEndsStalledWriteOnIdleConnection(t *testing.T) {
	t.Parallel() // timers and sockets: they wait, side by side
	// A request net/http answers first: it then sees the connection idle.
	srv, l, _ := s12HugeHit(t, true)
	s12WaitWriting(t, l)
	time.Sleep(100 * time.Millisecond)
	took := s12Stop(srv, l, time.Second)
	if took > 1500*time.Millisecond {
		t.Errorf("stop took %v", took)
	}
	for deadline := time.Now().Add(time.Second); l.writing.Load() != 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the hit still being written 1 s after the stop's deadline")
		}
	}
}

// TestS12StopDeadlineEndsSlowReaderOnIdleConnection: a reader taking a
// chunk well within write_timeout must still be cut at the deadline.
func TestS12StopDeadlineEndsSlowReaderOnIdleConnection(t *testing.T) {
	t.Parallel() // timers and sockets: they wait, side by side
	srv, l, c := s12HugeHit(t, true)
	go func() {
		b := make([]byte, 16<<10)
		for {
			_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
			if _, err := c.Read(b); err != nil {
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	s12WaitWriting(t, l)
	s12Stop(srv, l, time.Second)
	// The kernel still sends what it holds after the close; the write
	// itself must be over.
	for deadline := time.Now().Add(time.Second); l.writing.Load() != 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the slow reader's hit still being written 1 s after the stop's deadline")
		}
	}
}
