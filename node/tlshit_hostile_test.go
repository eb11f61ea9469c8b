package node

import (
	"crypto/tls"
	"io"
	"log/slog"
	"net"
	"os"
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
