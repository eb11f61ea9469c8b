package node

import (
	"crypto/tls"
	"io"
	"log/slog"
	"net"
	"os"
	"runtime"
	"sync"
	"syscall"
	"testing"
	"time"
)

// emfileListener fails its first Accept with EMFILE (the process is out
// of file descriptors: what a burst of connections causes), as the
// kernel reports it through net.TCPListener.
type emfileListener struct {
	net.Listener
	once sync.Once
}

func (l *emfileListener) Accept() (net.Conn, error) {
	var err error
	l.once.Do(func() {
		err = &net.OpError{Op: "accept", Net: "tcp", Addr: l.Addr(), Err: os.NewSyscallError("accept", syscall.EMFILE)}
	})
	if err != nil {
		return nil, err
	}
	return l.Listener.Accept()
}

// TestHandshakeListenerSurvivesEMFILE: as net/http's Serve does, the
// handshake listener retries an accept error that passes (EMFILE, ENFILE:
// file descriptors out for a moment) with a backoff, instead of closing the
// HTTPS listener for good (a hostile review found it did).
func TestHandshakeListenerSurvivesEMFILE(t *testing.T) {
	tcp, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cert := selfSigned(t)
	conf := &tls.Config{Certificates: []tls.Certificate{cert}}
	hs := newHandshakeListener(&emfileListener{Listener: tcp}, conf, 5*time.Second, slog.New(slog.NewTextHandler(io.Discard, nil)))
	defer hs.Close()
	go func() {
		time.Sleep(100 * time.Millisecond)
		c, err := tls.Dial("tcp", tcp.Addr().String(), &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // test
		if err == nil {
			defer c.Close()
			time.Sleep(2 * time.Second)
		}
	}()
	c, err := hs.Accept()
	if err != nil {
		t.Fatalf("the HTTPS listener died on a temporary accept error (net/http would retry it): %v", err)
	}
	c.Close()
}

// TestHandshakeListenerCloseAbandonsHandshakes: Close ends the handshakes
// under way (their connections were never accepted, so the server's
// Shutdown cannot see them): a client that never sends its ClientHello is
// disconnected at once, not at the handshake timeout.
func TestHandshakeListenerCloseAbandonsHandshakes(t *testing.T) {
	tcp, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	conf := &tls.Config{Certificates: []tls.Certificate{selfSigned(t)}}
	hs := newHandshakeListener(tcp, conf, time.Minute, slog.New(slog.NewTextHandler(io.Discard, nil)))
	c, err := net.Dial("tcp", tcp.Addr().String()) // never sends a ClientHello
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	time.Sleep(100 * time.Millisecond) // accepted, its handshake under way
	_ = hs.Close()
	_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
	_, err = c.Read(make([]byte, 1))
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatal("2 s after Close the stalled handshake still holds its connection open (until the 1 min handshake timeout)")
	}
}

// TestHandshakeWorkersStallIndependently: handshakes run on reused
// workers, and a worker stuck in one (a client that never sends its
// ClientHello) holds nobody else's: with stalled connections open, a stream
// of real handshakes is still accepted, one after another and several at
// once. After Close no worker is left waiting.
func TestHandshakeWorkersStallIndependently(t *testing.T) {
	tcp, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	conf := &tls.Config{Certificates: []tls.Certificate{selfSigned(t)}}
	before := runtime.NumGoroutine()
	hs := newHandshakeListener(tcp, conf, time.Minute, slog.New(slog.NewTextHandler(io.Discard, nil)))
	for range 3 {
		c, err := net.Dial("tcp", tcp.Addr().String()) // never sends a ClientHello
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
	}
	accepted := make(chan net.Conn)
	go func() {
		for {
			c, err := hs.Accept()
			if err != nil {
				close(accepted)
				return
			}
			accepted <- c
		}
	}()
	dial := func() {
		c, err := tls.Dial("tcp", tcp.Addr().String(), &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // test
		if err != nil {
			t.Error(err)
			return
		}
		_ = c.Close()
	}
	for round := range 5 {
		var wg sync.WaitGroup
		n := 1 + round*3 // one alone, then several at once
		for range n {
			wg.Go(dial)
		}
		for range n {
			select {
			case c := <-accepted:
				_ = c.Close()
			case <-time.After(10 * time.Second):
				t.Fatalf("round %d: a handshake was not accepted in 10 s beside 3 stalled ones", round)
			}
		}
		wg.Wait()
	}
	_ = hs.Close()
	<-accepted
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > before {
		t.Errorf("%d goroutines after Close, %d before the listener: handshake workers left behind", n, before)
	}
}
