// Package h2server serves the HTTP/2 connections (RFC 9113) of the TLS
// listener, and answers fresh cache hits on each connection's read loop.
//
// Why hand-written: net/http's HTTP/2 server (x/net/http2, bundled into
// net/http) runs every stream's handler in a goroutine of its own and hands
// every frame it writes to the connection's serve loop through channels;
// a HEADERS frame, and any DATA frame larger than its 4 KiB buffer, is
// written by a goroutine started for that one frame, and each is flushed
// with its own TLS record and write system call. On this project's 2-core
// machine a handler that writes a static 4 KiB body through it reaches
// 0.57× nginx's HTTP/2 rate (h2load -c64 -m10), so no hit path behind it
// can come near. No maintained Go library serves HTTP/2 another way.
//
// What is kept from the well-kept libraries: x/net/http2's Framer (frame
// parsing and writing, CONTINUATION assembly, header-list limits and
// field validation) and its hpack coder. What is written here is only the
// connection: stream states, flow control, and when to flush. A request
// the hit path may answer (package hitpath decides which fields allow it,
// the answerer is the same one the HTTP/1.1 loop asks: one hit decision)
// is answered on the read loop, its frames added to the write buffer, and
// the buffer is flushed once the loop has read every frame the client
// sent: ten requests in one TLS record get ten answers in one write.
// Every other request runs the ordinary http.Handler in a goroutine, as
// net/http's server runs it.
package h2server

import (
	"context"
	"crypto/tls"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/edgecache/edge/hitpath"
)

// Defaults, with their reasons.
const (
	// DefaultMaxConcurrentStreams bounds the requests in flight on one
	// connection (browsers open about 100; RFC 9113 recommends at least
	// 100).
	DefaultMaxConcurrentStreams = 250
	// DefaultMaxHeaderListSize is the largest header list a request may
	// carry (net/http's default MaxHeaderBytes).
	DefaultMaxHeaderListSize = 1 << 20
	// streamRecvWindow is what one request body may have in flight
	// unread, connRecvWindow what all of a connection's may: a client
	// uploads at full speed over a 1 MiB window, and a connection never
	// holds more than 1 MiB of unread bodies (net/http's defaults too).
	streamRecvWindow = 1 << 20
	connRecvWindow   = 1 << 20
	// writeBufferBytes is the connection's write buffer: several hits'
	// frames are sent in one write, and a full buffer is written at once.
	writeBufferBytes = 32 << 10
	// readBufferBytes holds the frames of a burst of requests.
	readBufferBytes = 16 << 10
	// handlerChunkBytes is what a handler's writes gather before they
	// are sent as DATA frames (net/http's HTTP/2 server gathers 4 KiB;
	// larger chunks mean fewer frames for a body written in small writes).
	handlerChunkBytes = 16 << 10
	// prefaceTimeout bounds the wait for the client's preface and
	// SETTINGS when no ReadHeaderTimeout is set.
	prefaceTimeout = 10 * time.Second
	// resetHandlersFactor: handlers of streams the client has reset may
	// still be running; once they number this many times the stream
	// limit, new streams are refused (the "rapid reset" attack,
	// CVE-2023-44487, cannot pile up handlers).
	resetHandlersFactor = 2
)

// Server serves HTTP/2 connections. Its zero value is not usable: set
// Handler. Fields must not change once ServeConn has been called.
type Server struct {
	// Handler answers every request the hit path does not.
	Handler http.Handler
	// Hits answers fresh cache hits on the read loop (nil: none); Fields
	// decides which requests it is asked.
	Hits   hitpath.Answerer
	Fields *hitpath.Fields

	MaxConcurrentStreams uint32        // 0: DefaultMaxConcurrentStreams
	MaxHeaderListSize    uint32        // 0: DefaultMaxHeaderListSize
	ReadHeaderTimeout    time.Duration // for the preface and the first SETTINGS
	IdleTimeout          time.Duration // a connection with no stream for this long is closed (0: never)
	// WriteTimeout ends a connection whose writes make no progress for
	// this long, and is each response's write deadline unless the handler
	// sets another (http.ResponseController.SetWriteDeadline).
	WriteTimeout time.Duration
	Log          *slog.Logger
	Metrics      *Metrics // nil: none

	dates hitpath.Dates

	mu       sync.Mutex
	conns    map[*conn]struct{}
	draining bool
}

// ServeConn serves c until the client or the server closes it. h, when not
// nil, is the handler for this connection's requests in place of
// s.Handler (net/http's TLSNextProto hook passes one that sets the
// request's server context).
func (s *Server) ServeConn(ctx context.Context, c net.Conn, h http.Handler) {
	if h == nil {
		h = s.Handler
	}
	sc := newConn(ctx, s, c, h)
	if !s.track(sc, true) {
		_ = c.Close()
		return
	}
	defer s.track(sc, false)
	sc.serve()
}

// NextProto is net/http's TLSNextProto hook for "h2": h is net/http's
// handler for the connection, whose BaseContext carries the server's
// context values (http.ServerContextKey, http.LocalAddrContextKey).
func (s *Server) NextProto(_ *http.Server, c *tls.Conn, h http.Handler) {
	ctx := context.Background()
	if bc, ok := h.(interface{ BaseContext() context.Context }); ok {
		ctx = bc.BaseContext()
	}
	s.ServeConn(ctx, c, h)
}

func (s *Server) track(c *conn, add bool) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if add {
		if s.draining {
			return false
		}
		if s.conns == nil {
			s.conns = map[*conn]struct{}{}
		}
		s.conns[c] = struct{}{}
		return true
	}
	delete(s.conns, c)
	return true
}

// Drain asks every connection to finish: each sends GOAWAY, answers the
// streams it has and closes. New connections are closed at once. It does
// not wait (net/http's Shutdown waits for the connections it handed over).
func (s *Server) Drain() {
	s.mu.Lock()
	s.draining = true
	conns := make([]*conn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	for _, c := range conns {
		c.drain()
	}
}

// Conns is the number of open connections.
func (s *Server) Conns() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.conns)
}

// headerTimeout bounds the preface, the first SETTINGS and each request
// head: ReadHeaderTimeout, or prefaceTimeout when it is unset.
func (s *Server) headerTimeout() time.Duration {
	if s.ReadHeaderTimeout > 0 {
		return s.ReadHeaderTimeout
	}
	return prefaceTimeout
}

func (s *Server) maxStreams() uint32 {
	if s.MaxConcurrentStreams == 0 {
		return DefaultMaxConcurrentStreams
	}
	return s.MaxConcurrentStreams
}

func (s *Server) maxHeaderList() uint32 {
	if s.MaxHeaderListSize == 0 {
		return DefaultMaxHeaderListSize
	}
	return s.MaxHeaderListSize
}

func (s *Server) log() *slog.Logger {
	if s.Log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return s.Log
}
