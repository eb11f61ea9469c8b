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

	unverified atomic.Int64 // handshakes under way from addresses not verified yet
	// slots are the connection slots taken and not yet given back: quic-go
	// ends a connection's context, and so runs the release, on its own
	// goroutine, which a stop's return had raced (a review's
	// TestS11ConnStopLeavesNoSlot read one connection still counted after
	// Run returned, once in a whole make test).
	slots sync.WaitGroup
}

// h3SlotsWait bounds how long closeTransport waits for the slots of the
// connections the transport's close ended to be given back.
const h3SlotsWait = 2 * time.Second

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
	// A connection's slot is taken at its first packet, before its
	// handshake, and one over a bound is refused there: refused once
	// accepted, each had cost a full TLS handshake (a flood over the bound
	// cost the node what serving it would have), and a burst of them all
	// passed a check of the connections accepted so far. The slot is given
	// back when the connection ends, handshake or not (context.AfterFunc on
	// the context quic-go ends then). An address is not verified at its
	// first packet, so while many handshakes from unverified addresses are
	// under way, new ones are asked to prove theirs first (a Retry, one
	// round trip more): spoofed addresses cannot hold the slots.
	// The transport outlives the listener (closing the listener leaves
	// the connections accepted, which the stop lets end): shutdown closes
	// it once they have.
	tr := &quic.Transport{Conn: pc,
		VerifySourceAddress: func(net.Addr) bool { return f.unverified.Load() >= h3RetryAbove },
		ConnContext: func(ctx context.Context, ci *quic.ClientInfo) (context.Context, error) {
			addr := ipOf(ci.RemoteAddr)
			if f.limiter.admitInitial(addr) != "" {
				return ctx, errTooManyConnections
			}
			s := &h3Slot{}
			if !ci.AddrVerified {
				s.unverified.Store(true)
				f.unverified.Add(1)
			}
			f.slots.Add(1)
			context.AfterFunc(ctx, func() {
				defer f.slots.Done()
				f.verified(s)
				f.limiter.release(addr)
			})
			return context.WithValue(ctx, h3SlotKey{}, s), nil
		}}
	f.mu.Lock()
	if f.stopping {
		f.mu.Unlock()
		return http.ErrServerClosed
	}
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
		if s, ok := conn.Context().Value(h3SlotKey{}).(*h3Slot); ok {
			f.verified(s) // a handshake done: its address answered
		}
		if !f.track() {
			_ = conn.CloseWithError(quic.ApplicationErrorCode(http3.ErrCodeNoError), "")
			return http.ErrServerClosed
		}
		go func() {
			defer f.conns.Done()
			f.handleConn(conn)
		}()
	}
}

// h3RetryAbove is how many handshakes from unverified addresses may be
// under way before new connections must prove their address (a Retry):
// a real client's handshake takes a round trip or two, so hundreds under
// way at once is a flood, and each holds a connection slot until its
// handshake times out.
const h3RetryAbove = 256

// h3Slot is a QUIC connection's slot, taken at its first packet.
type h3Slot struct {
	unverified atomic.Bool // counted in h3Front.unverified
}

type h3SlotKey struct{}

// verified takes s out of the count of unverified handshakes, once.
func (f *h3Front) verified(s *h3Slot) {
	if s.unverified.CompareAndSwap(true, false) {
		f.unverified.Add(-1)
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

// maxUniStreams bounds the unidirectional streams of a connection whose
// handlers have not returned. quic-go gives the client a new stream's
// credit as soon as one is handed over, and reads each stream's type with
// no deadline (none can be set: the control stream is read for the
// connection's life after its type), so a client that opened streams and
// never sent their types held a goroutine each for as long as it kept the
// connection (a review: 99 of 100 still waiting 10 × read_header_timeout
// later). A client has one control stream and two QPACK streams, whose
// handlers return once their type is read, as they do for GREASE types:
// at most one handler stays.
const maxUniStreams = 8

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
		var open atomic.Int32 // handlers not yet returned
		for {
			str, err := conn.AcceptUniStream(conn.Context())
			if err != nil {
				return
			}
			if open.Load() >= maxUniStreams {
				str.CancelRead(quic.StreamErrorCode(http3.ErrCodeStreamCreationError))
				continue
			}
			open.Add(1)
			go func() {
				defer open.Add(-1)
				hconn.HandleUnidirectionalStream(str)
			}()
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
	// No connection starts once the transport is closed: every slot taken
	// is given back by the AfterFunc its context's end runs.
	released := make(chan struct{})
	go func() { f.slots.Wait(); close(released) }()
	select {
	case <-released:
	case <-time.After(h3SlotsWait):
		f.log.Warn("http3: connection slots not given back at the stop")
	}
}
