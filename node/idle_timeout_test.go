// Regression tests from a hostile review of batchConn's flush on Read:
// each failed before its fix; the comments describe the bug as found.
package node

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// pipeListener hands out the server ends of net.Pipe pairs: a write blocks
// until the client reads it, which models a client (or a dead path) whose
// receive window is full, deterministically.
type pipeListener struct {
	ch     chan net.Conn
	closed chan struct{}
	once   sync.Once
}

func newPipeListener() *pipeListener {
	return &pipeListener{ch: make(chan net.Conn), closed: make(chan struct{})}
}

func (l *pipeListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.ch:
		return c, nil
	case <-l.closed:
		return nil, errors.New("closed")
	}
}
func (l *pipeListener) Close() error   { l.once.Do(func() { close(l.closed) }); return nil }
func (l *pipeListener) Addr() net.Addr { return pipeAddr{} }
func (l *pipeListener) dial() net.Conn {
	a, b := net.Pipe()
	l.ch <- a
	return b
}

type pipeAddr struct{}

func (pipeAddr) Network() string { return "pipe" }
func (pipeAddr) String() string  { return "pipe" }

// TestIdleTimeoutReapsStalledClient: a client sends a request, reads
// the response header and then stops reading (gone silent: a dead mobile
// path, a slowloris). The handler's last write is exactly one buffer (the
// header flushed first, then a 4 KiB body, the shape the Read flush was
// added for). net/http clears the write deadline after the response and
// relies on IdleTimeout (a read deadline) to reap the idle connection.
// Before the change the Read waiting for the next request times out and
// Close breaks the stuck hold-timer flush; with the change the Read itself
// is stuck in a write with no deadline, so IdleTimeout never fires and the
// connection and its goroutines are held until the process shuts down.
func TestIdleTimeoutReapsStalledClient(t *testing.T) {
	body := strings.Repeat("z", 4096)
	ln := newPipeListener()
	closed := make(chan struct{})
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Length", "4096")
			w.WriteHeader(http.StatusOK)
			http.NewResponseController(w).Flush()
			_, _ = io.WriteString(w, body)
		}),
		IdleTimeout:  200 * time.Millisecond,
		WriteTimeout: 200 * time.Millisecond,
		ConnState: func(c net.Conn, s http.ConnState) {
			if s == http.StateClosed {
				close(closed)
			}
		},
	}
	go func() { _ = srv.Serve(batchListener{Listener: ln, stats: new(batchStats)}) }()
	defer srv.Close()
	conn := ln.dial()
	defer conn.Close()
	fmt.Fprintf(conn, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	// Read the header only, then go silent.
	br := bufio.NewReaderSize(conn, 16)
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		if line == "\r\n" {
			break
		}
	}
	select {
	case <-closed:
	case <-time.After(3 * time.Second):
		t.Fatal("IdleTimeout 200ms, WriteTimeout 200ms: a silent client's connection is still open after 3s (the Read that waits for the next request is stuck sending held bytes, with no write deadline)")
	}
}
