package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
)

// h3Front serves HTTP/3 from an accept loop of its own, around quic-go's
// http3.RawServerConn, for one reason: a request stream's HEADERS must
// come within limits.read_header_timeout, as on the TCP listeners.
// http3.Server waits for them without a bound, and the connection's idle
// timer stops while any stream is open, so a client that opened streams,
// sent a few bytes of HEADERS and kept the connection alive with pings
// held a goroutine and its buffers per stream for ever (250 streams a
// connection, connections unbounded; a review's
// TestReviewH3PartialHeadersAreTimedOut). quic-go has no per-stream
// header timeout; everything else (framing, QPACK, the handler's
// request and response) is still quic-go's.
//
// What it does not do that http3.Server does: a graceful stop sends no
// GOAWAY (the public API does not reach the control stream). New request
// streams are refused with H3_REQUEST_REJECTED instead, which RFC 9114
// §8.1 lets a client retry elsewhere, while the requests under way end;
// and since no GOAWAY tells the client to close, each connection is kept
// h3StopLinger past its last request's end (or until its client closes
// it, or the stop's deadline), not closed as its handlers return.
type h3Front struct {
	srv           *http3.Server // the handler, TLS and QUIC configs, settings, header limit, idle timeout
	headerTimeout time.Duration
	log           *slog.Logger
	limiter       *connLimiter // the public listeners' connection bounds, shared with TCP

	grace     context.Context // ends when a stop begins: no new connections or streams
	stopGrace context.CancelFunc
	hard      context.Context // ends when the stop's deadline passed: connections close
	stopHard  context.CancelFunc

	mu       sync.Mutex // orders conns.Add before the stop's conns.Wait
	stopping bool
	conns    sync.WaitGroup
	tr       *quic.Transport // serve's, closed by shutdown once its connections ended
}

// h3StopLinger is how long a stopping node keeps an HTTP/3 connection
// after its last request's handler returned. A handler's return means
// quic-go took the bytes, not that the client has them: closing then lost
// what was still in flight, and quic-go's client drops what it received
// but had not read yet once the connection closes (a review's
// TestS6H3GracefulStopDeliversTheWholeResponse: 0 of 300 KiB read 300 ms
// after the stop began). quic-go's own server sent GOAWAY and left the
// connection to the client until the deadline; two seconds covers a
// client that reads what it was sent, and a connection idle longer than
// that when the stop begins closes at once.
const h3StopLinger = 2 * time.Second

func newH3Front(srv *http3.Server, headerTimeout time.Duration, log *slog.Logger, conns *connLimiter) *h3Front {
	hard, stopHard := context.WithCancel(context.Background())
	grace, stopGrace := context.WithCancel(hard)
	return &h3Front{srv: srv, headerTimeout: headerTimeout, log: log, limiter: conns,
		grace: grace, stopGrace: stopGrace, hard: hard, stopHard: stopHard}
}

// serve accepts connections on pc until shutdown; it returns
// http.ErrServerClosed then, or the listener's error.
func (f *h3Front) serve(pc net.PacketConn) error {
	// A connection over a bound is refused before its handshake, from its
	// first packet: refused once accepted, each had cost a full TLS
	// handshake (a flood over the bound cost the node what serving it
	// would have). The address is not verified yet, so nothing is counted
	// for it here; admit, below, still decides.
	// The transport outlives the listener (closing the listener leaves
	// the connections accepted, which the stop lets end): shutdown closes
	// it once they have.
	tr := &quic.Transport{Conn: pc, ConnContext: func(ctx context.Context, ci *quic.ClientInfo) (context.Context, error) {
		if reason := f.limiter.wouldRefuse(ipOf(ci.RemoteAddr)); reason != "" {
			return ctx, errTooManyConnections
		}
		return ctx, nil
	}}
	f.mu.Lock()
	f.tr = tr
	f.mu.Unlock()
	ln, err := tr.Listen(f.srv.TLSConfig, f.srv.QUICConfig)
	if err != nil {
		return fmt.Errorf("node: http3 listen: %w", err)
	}
	defer func() { _ = ln.Close() }()
	for {
		conn, err := ln.Accept(f.grace)
		if err != nil {
			if f.grace.Err() != nil {
				return http.ErrServerClosed
			}
			return fmt.Errorf("node: http3 accept: %w", err)
		}
		addr := ipOf(conn.RemoteAddr())
		if f.limiter.admit(addr) != "" {
			// The QUIC connections of one address count with its TCP
			// ones (connLimiter).
			_ = conn.CloseWithError(quic.ApplicationErrorCode(http3.ErrCodeExcessiveLoad), "too many connections")
			continue
		}
		if !f.track() {
			f.limiter.release(addr)
			_ = conn.CloseWithError(quic.ApplicationErrorCode(http3.ErrCodeNoError), "")
			return http.ErrServerClosed
		}
		go func() {
			defer f.conns.Done()
			defer f.limiter.release(addr)
			f.handleConn(conn)
		}()
	}
}

// errTooManyConnections refuses a QUIC connection over a bound before its
// handshake (quic-go answers CONNECTION_REFUSED).
var errTooManyConnections = errors.New("too many connections")

// track counts a new connection, unless the stop has begun.
func (f *h3Front) track() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.stopping {
		return false
	}
	f.conns.Add(1)
	return true
}

// handleConn serves conn's streams until it closes or the stop's
// deadline passes.
func (f *h3Front) handleConn(conn *quic.Conn) {
	hconn, err := f.srv.NewRawServerConn(conn)
	if err != nil {
		f.log.Debug("http3 connection", "err", err)
		_ = conn.CloseWithError(quic.ApplicationErrorCode(http3.ErrCodeInternalError), "")
		return
	}
	go func() { // the client's control and QPACK streams
		for {
			str, err := conn.AcceptUniStream(conn.Context())
			if err != nil {
				return
			}
			go hconn.HandleUnidirectionalStream(str)
		}
	}()
	closed := make(chan struct{})
	defer close(closed)
	go func() { // the stop's deadline closes what is left
		select {
		case <-f.hard.Done():
			_ = hconn.CloseWithError(quic.ApplicationErrorCode(http3.ErrCodeNoError), "")
		case <-closed:
		}
	}()
	var requests sync.WaitGroup
	var lastEnd atomic.Int64 // unix nanoseconds: when a request's handler last returned
	for {
		str, err := conn.AcceptStream(f.grace)
		if err != nil {
			break // closed by either side, or the stop began
		}
		// HEADERS within the bound; the handler clears it (tlsFront.wrap)
		// and the body's own limits apply from there.
		_ = str.SetReadDeadline(time.Now().Add(f.headerTimeout))
		requests.Go(func() {
			hconn.HandleRequestStream(str)
			lastEnd.Store(time.Now().UnixNano())
		})
	}
	stopping := conn.Context().Err() == nil
	if stopping {
		// Stopping: the requests under way end, new ones are refused.
		go func() {
			for {
				str, err := conn.AcceptStream(conn.Context())
				if err != nil {
					return
				}
				str.CancelRead(quic.StreamErrorCode(http3.ErrCodeRequestRejected))
				str.CancelWrite(quic.StreamErrorCode(http3.ErrCodeRequestRejected))
			}
		}()
	}
	requests.Wait()
	if stopping {
		if linger := time.Until(time.Unix(0, lastEnd.Load()).Add(h3StopLinger)); linger > 0 {
			t := time.NewTimer(linger)
			select {
			case <-conn.Context().Done(): // the client closed it
			case <-f.hard.Done():
			case <-t.C:
			}
			t.Stop()
		}
	}
	_ = hconn.CloseWithError(quic.ApplicationErrorCode(http3.ErrCodeNoError), "")
}

// shutdown stops accepting, lets the requests under way end until ctx
// does, then closes every connection.
func (f *h3Front) shutdown(ctx context.Context) error {
	f.mu.Lock()
	f.stopping = true
	f.mu.Unlock()
	f.stopGrace()
	done := make(chan struct{})
	go func() { f.conns.Wait(); close(done) }()
	defer f.closeTransport()
	select {
	case <-done:
		f.stopHard()
		return nil
	case <-ctx.Done():
		f.stopHard()
		<-done
		return errors.Join(errors.New("node: http3: requests still running at the stop's deadline"), ctx.Err())
	}
}

// closeTransport closes serve's QUIC transport, after its connections
// ended (it would cut them: quic.Transport.Close destroys them unsent).
func (f *h3Front) closeTransport() {
	f.mu.Lock()
	tr := f.tr
	f.mu.Unlock()
	if tr != nil {
		_ = tr.Close()
	}
}
