// Command hitfloor serves one cached 4 KiB object as cheaply as three kinds of
// Go server can, to bound what edge's hit could cost (scripts/bench-compare.sh
// runs the first two next to edge, nginx and Varnish):
//
//   - -mode nethttp: net/http with a handler that copies a pre-built header
//     map and writes the body, behind a listener that merges net/http's
//     "full 4096-byte buffer, then the rest" pair into one writev (what
//     edge's tuning.write_batching does). This is the floor of any hit path
//     that keeps net/http: edge's own work is what it costs above it.
//   - -mode raw: a goroutine per connection, a bufio.Reader, a minimal
//     request-line and header scanner, one read deadline per request, and
//     one write per response from a pre-serialised header block plus Date
//     and Age. This is the floor of a specialised HTTP/1.1 hit path.
//   - -mode epoll: the raw mode's answers from one epoll loop per P, each
//     on a locked OS thread with its own SO_REUSEPORT socket (epoll.go):
//     the floor of an event-loop hit path (docs/benchmarks.md, "An
//     event-loop floor").
//
// None is a server: no limits, no fallback, one object. They exist only
// to be measured.
package main

import (
	"bufio"
	"bytes"
	"flag"
	"log"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

var (
	body   = bytes.Repeat([]byte("x"), 4096)
	stored = time.Now()
	header = http.Header{
		"Cache-Status":   {"floor; hit"},
		"Via":            {"1.1 floor"},
		"Cache-Control":  {"public, max-age=3600"},
		"Content-Type":   {"application/octet-stream"},
		"Content-Length": {"4096"},
		"Etag":           {`"s-4096"`},
	}
	// The raw mode's pre-serialised block: everything but Date and Age.
	block = []byte("Cache-Status: floor; hit\r\nVia: 1.1 floor\r\nCache-Control: public, max-age=3600\r\n" +
		"Content-Type: application/octet-stream\r\nContent-Length: 4096\r\nEtag: \"s-4096\"\r\n\r\n")
)

func main() {
	listen := flag.String("listen", "127.0.0.1:18085", "address")
	mode := flag.String("mode", "raw", "raw, epoll or nethttp")
	flag.Parse()
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		log.Fatal(err)
	}
	switch *mode {
	case "nethttp":
		srv := &http.Server{Handler: http.HandlerFunc(serveNetHTTP), ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 120 * time.Second}
		log.Fatal(srv.Serve(mergingListener{ln}))
	case "raw", "epoll":
		var date atomic.Pointer[[]byte]
		refresh := func() {
			b := []byte("Date: " + time.Now().UTC().Format(http.TimeFormat) + "\r\n")
			date.Store(&b)
		}
		refresh()
		go func() {
			for range time.Tick(time.Second) {
				refresh()
			}
		}()
		if *mode == "epoll" {
			_ = ln.Close() // each loop listens on its own SO_REUSEPORT socket
			serveEpoll(*listen, &date)
		}
		for {
			c, err := ln.Accept()
			if err != nil {
				log.Fatal(err)
			}
			go serveRaw(c, &date)
		}
	default:
		log.Fatalf("mode %q: want raw, epoll or nethttp", *mode)
	}
}

func serveNetHTTP(w http.ResponseWriter, _ *http.Request) {
	h := w.Header()
	for k, v := range header {
		h[k] = v
	}
	h["Age"] = []string{strconv.FormatInt(int64(time.Since(stored)/time.Second), 10)}
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(body)
}

// serveRaw answers GET requests on c until the client closes, or sends
// anything but a plain HTTP/1.1 GET (where a real fast path would hand the
// connection to net/http).
func serveRaw(c net.Conn, date *atomic.Pointer[[]byte]) {
	defer c.Close()
	br := bufio.NewReaderSize(c, 4096)
	out := make([]byte, 0, 8192)
	for {
		_ = c.SetReadDeadline(time.Now().Add(120 * time.Second))
		line, err := br.ReadSlice('\n')
		if err != nil {
			return
		}
		method, rest, ok := bytes.Cut(line, []byte(" "))
		if !ok || string(method) != "GET" {
			return
		}
		_, proto, ok := bytes.Cut(rest, []byte(" "))
		if !ok || !bytes.HasPrefix(proto, []byte("HTTP/1.1")) {
			return
		}
		closeAfter := false
		for {
			h, err := br.ReadSlice('\n')
			if err != nil {
				return
			}
			if len(h) <= 2 {
				break // the blank line
			}
			name, value, ok := bytes.Cut(h, []byte(":"))
			if !ok {
				return
			}
			if bytes.EqualFold(name, []byte("Connection")) && bytes.Contains(bytes.ToLower(value), []byte("close")) {
				closeAfter = true
			}
		}
		out = appendAnswer(out[:0], date)
		if _, err := c.Write(out); err != nil || closeAfter {
			return
		}
	}
}

// appendAnswer appends the object's answer: status line, Date, Age, the
// pre-serialised block and the body.
func appendAnswer(out []byte, date *atomic.Pointer[[]byte]) []byte {
	out = append(out, "HTTP/1.1 200 OK\r\n"...)
	out = append(out, *date.Load()...)
	out = append(out, "Age: "...)
	out = strconv.AppendInt(out, int64(time.Since(stored)/time.Second), 10)
	out = append(out, "\r\n"...)
	out = append(out, block...)
	return append(out, body...)
}

// mergingListener wraps connections in mergingConn.
type mergingListener struct{ net.Listener }

func (l mergingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &mergingConn{Conn: c}, nil
}

// mergingConn holds a write of exactly net/http's buffer size and sends it
// with the next write as one writev (edge's node/batchconn.go, without its
// hold limit: every response here has a next write).
type mergingConn struct {
	net.Conn
	mu   sync.Mutex
	held []byte
}

func (c *mergingConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.held) > 0 {
		bufs := net.Buffers{c.held, p}
		n, err := bufs.WriteTo(c.Conn)
		held := len(c.held)
		c.held = c.held[:0]
		return max(int(n)-held, 0), err
	}
	if len(p) == 4096 {
		c.held = append(c.held[:0], p...)
		return len(p), nil
	}
	return c.Conn.Write(p)
}
