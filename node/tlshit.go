package node

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/edgecache/edge/hitpath"
)

// The HTTP/1.1 hit path on the TLS listener. net/http serves HTTP/2 only
// on connections it sees as *tls.Conn, and the hit path must sit under
// net/http's reads, so the handshake moves in front of both: the
// handshake listener hands net/http connections whose handshake is done,
// those that negotiated HTTP/2 (or an ACME challenge) as the *tls.Conn
// itself (hitpath's Config.Skip), the HTTP/1.1 ones inside the hit path.
// net/http then does not know those are TLS, so the front gives their
// requests the connection state back (tlsStateOf, in tlsFront.wrap).

// handshakeListener accepts TCP connections and returns them as *tls.Conn
// once their handshake is done; handshakes run concurrently, each bounded
// by timeout, as net/http's own run in the connections' goroutines.
//
// They run on reused goroutines (handshake workers): a handshake's call
// depth (crypto/tls, the curve and signature code) grows a new goroutine's
// stack several times, and copying it was about a tenth of the CPU of a
// new HTTPS connection (docs/benchmarks.md, new handshakes). A worker
// keeps its stack for the next handshake. Idle workers wait on a stack:
// the one idle the shortest time takes the next connection, so under a
// light load the same few stay warm and the others time out after
// idleFor (a queue would rotate through all of them and keep a burst's
// workers for good; a hostile review measured 300 left under 40
// handshakes a second). At most maxIdle wait; while none is idle a new
// one starts, so no handshake waits for another, as with a goroutine each.
type handshakeListener struct {
	net.Listener
	conf    *tls.Config
	timeout time.Duration
	log     *slog.Logger

	idleMu  sync.Mutex
	idle    []*handshakeWorker // the most recently idle last
	maxIdle int
	idleFor time.Duration

	ready chan net.Conn
	done  chan struct{} // closed by Close
	once  sync.Once
	// ctx ends with Close: handshakes under way are abandoned then (their
	// connections were never accepted, so the server's Shutdown cannot
	// see them).
	ctx    context.Context
	cancel context.CancelFunc

	mu  sync.Mutex
	err error // the accept error that ended the loop
}

func newHandshakeListener(ln net.Listener, conf *tls.Config, timeout time.Duration, log *slog.Logger) *handshakeListener {
	return newHandshakeListenerIdle(ln, conf, timeout, log, workerIdle)
}

// newHandshakeListenerIdle is newHandshakeListener with workers that exit
// after idleFor (tests use a short one).
func newHandshakeListenerIdle(ln net.Listener, conf *tls.Config, timeout time.Duration, log *slog.Logger, idleFor time.Duration) *handshakeListener {
	if timeout <= 0 {
		timeout = time.Minute
	}
	l := &handshakeListener{Listener: ln, conf: conf, timeout: timeout, log: log, ready: make(chan net.Conn), done: make(chan struct{}),
		maxIdle: max(4, 2*runtime.GOMAXPROCS(0)), idleFor: idleFor}
	l.ctx, l.cancel = context.WithCancel(context.Background())
	go l.acceptLoop()
	return l
}

func (l *handshakeListener) acceptLoop() {
	var backoff time.Duration
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			if retryable(err) { // as net/http's Serve retries a temporary accept error
				backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
				select {
				case <-time.After(backoff):
					continue
				case <-l.done:
				}
			}
			l.mu.Lock()
			l.err = err
			l.mu.Unlock()
			_ = l.Close()
			return
		}
		backoff = 0
		if w := l.popIdle(); w != nil {
			w.conns <- c // buffered: never blocks
		} else {
			go l.worker(c)
		}
	}
}

// workerIdle is how long a handshake worker waits for the next connection
// before it exits: long enough to stay through a burst's gaps, short
// enough that a past burst's workers do not stay for good.
const workerIdle = 10 * time.Second

// handshakeWorker is an idle worker's mailbox: popIdle's taker sends it
// the next connection.
type handshakeWorker struct{ conns chan net.Conn }

// worker does c's handshake, then those of the connections given to it
// while idle, until it has been idle for idleFor, the idle stack is full,
// or the listener closes.
func (l *handshakeListener) worker(c net.Conn) {
	w := &handshakeWorker{conns: make(chan net.Conn, 1)}
	idle := time.NewTimer(l.idleFor)
	defer idle.Stop()
	for {
		l.handshake(c)
		if !l.pushIdle(w) {
			return
		}
		idle.Reset(l.idleFor)
		select {
		case c = <-w.conns:
			continue
		case <-idle.C:
		case <-l.done:
		}
		if l.removeIdle(w) {
			return
		}
		// Taken off the stack by the accept loop at the same moment: its
		// connection is on the way and is this worker's to handshake (or,
		// closing, to fail and close).
		c = <-w.conns
	}
}

// pushIdle puts w on the idle stack, unless the stack is full or the
// listener is closing.
func (l *handshakeListener) pushIdle(w *handshakeWorker) bool {
	l.idleMu.Lock()
	defer l.idleMu.Unlock()
	select {
	case <-l.done:
		return false
	default:
	}
	if len(l.idle) >= l.maxIdle {
		return false
	}
	l.idle = append(l.idle, w)
	return true
}

// popIdle takes the most recently idle worker off the stack (nil if none).
func (l *handshakeListener) popIdle() *handshakeWorker {
	l.idleMu.Lock()
	defer l.idleMu.Unlock()
	n := len(l.idle)
	if n == 0 {
		return nil
	}
	w := l.idle[n-1]
	l.idle[n-1] = nil
	l.idle = l.idle[:n-1]
	return w
}

// removeIdle takes w off the stack; false if popIdle took it first.
func (l *handshakeListener) removeIdle(w *handshakeWorker) bool {
	l.idleMu.Lock()
	defer l.idleMu.Unlock()
	i := slices.Index(l.idle, w)
	if i < 0 {
		return false
	}
	l.idle = slices.Delete(l.idle, i, i+1)
	return true
}

func (l *handshakeListener) handshake(c net.Conn) {
	tc := tls.Server(c, l.conf)
	ctx, cancel := context.WithTimeout(l.ctx, l.timeout)
	err := tc.HandshakeContext(ctx)
	cancel()
	if err != nil {
		l.log.Debug("TLS handshake", "remote", c.RemoteAddr().String(), "err", err)
		var re tls.RecordHeaderError
		if errors.As(err, &re) && re.Conn != nil && recordLooksLikeHTTP(re.RecordHeader) {
			// As net/http says it: a client that sent plain HTTP to the
			// HTTPS port learns why, rather than seeing the connection
			// close (a review).
			_ = c.SetWriteDeadline(time.Now().Add(time.Second))
			_, _ = io.WriteString(c, "HTTP/1.0 400 Bad Request\r\n\r\nClient sent an HTTP request to an HTTPS server.\n")
		}
		_ = c.Close()
		return
	}
	select {
	case l.ready <- tc:
	case <-l.done:
		_ = tc.Close()
	}
}

// recordLooksLikeHTTP reports whether the first five bytes of what should
// have been a TLS record are the start of a plain HTTP request (net/http's
// test).
func recordLooksLikeHTTP(h [5]byte) bool {
	switch string(h[:]) {
	case "GET /", "HEAD ", "POST ", "PUT /", "OPTIO":
		return true
	}
	return false
}

// Accept returns the next connection whose handshake is done.
func (l *handshakeListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.ready:
		return c, nil
	case <-l.done:
		l.mu.Lock()
		defer l.mu.Unlock()
		if l.err != nil {
			return nil, l.err
		}
		return nil, net.ErrClosed
	}
}

// Close stops accepting; handshakes under way are abandoned.
func (l *handshakeListener) Close() error {
	var err error
	l.once.Do(func() {
		close(l.done)
		l.cancel()
		err = l.Listener.Close()
	})
	return err
}

// retryable reports whether an accept error passes (a timeout, or running
// out of file descriptors for a moment: EMFILE, ENFILE), as net/http's
// Serve judges it: the listener must not die of a connection flood.
func retryable(err error) bool {
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return true
	}
	var temp interface{ Temporary() bool }
	return errors.As(err, &temp) && temp.Temporary()
}

// notHTTP1 is hitpath's Config.Skip on the TLS listener: a connection
// that negotiated another protocol (h2, acme-tls/1) is net/http's alone.
func notHTTP1(c net.Conn) bool {
	tc, ok := c.(*tls.Conn)
	if !ok {
		return false
	}
	p := tc.ConnectionState().NegotiatedProtocol
	return p != "" && p != "http/1.1"
}

type tlsStateKey struct{}

// tlsConnContext is the TLS server's ConnContext: a connection inside the
// hit path carries its TLS state for its requests.
func tlsConnContext(ctx context.Context, c net.Conn) context.Context {
	if hc, ok := c.(*hitpath.Conn); ok {
		if tc, ok := hc.Conn.(*tls.Conn); ok {
			st := tc.ConnectionState()
			return context.WithValue(ctx, tlsStateKey{}, &st)
		}
	}
	return ctx
}

// withTLSState returns r with the TLS state of its connection when
// net/http could not see it (a connection inside the hit path), so that
// everything after the front sees the request as HTTPS.
func withTLSState(r *http.Request) *http.Request {
	if r.TLS != nil {
		return r
	}
	if st, ok := r.Context().Value(tlsStateKey{}).(*tls.ConnectionState); ok {
		r = r.WithContext(r.Context()) // a shallow copy: a handler must not change the request it was given
		r.TLS = st
	}
	return r
}
