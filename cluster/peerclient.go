package cluster

// peerClient sends plain-HTTP peer requests on the caller's goroutine.
//
// net/http's Transport writes each request on a connection's writeLoop
// goroutine and reads the answer on its readLoop, handing both over by
// channel: two goroutine hand-offs per peer request, 50–150 µs each on a
// 2-vCPU machine, on the path of every page a peer answers (docs/cluster.md,
// "Where it goes"; the peer hop's target is a local hit + 0.5 ms). A peer
// link is one HTTP/1.1 keep-alive connection pool to a node of our own, so
// it needs none of what the Transport's goroutines are for (HTTP/2,
// proxies, connection coalescing, background detection of closed idle
// connections). This client writes the request and reads the answer's
// header on the caller's goroutine and hands the connection to the body,
// which returns it to the pool at the body's end. Parsing stays net/http's
// (Request.Write, ReadResponse); the protocol's rules that matter here:
//
//   - a pooled connection the peer closed while idle fails the next
//     request before any byte of the answer arrives: the peer's other
//     pooled connections are dropped too (it restarted, most likely) and
//     the request is sent once more on a new connection (every peer
//     request is safe to repeat: reads, a purge);
//   - a connection goes back to the pool only after its answer was read to
//     the end, and neither side asked to close it;
//   - cancelling the request's context (a suspicion of the peer, the
//     client gone) unblocks the read at once by expiring the connection's
//     deadline for good (requestDeadline), and the connection is not
//     reused;
//   - idle connections are closed after idleTimeout (checked as
//     connections come back, for every address);
//   - the answer's header must arrive within headerTimeout.
//
// Peers over TLS (cluster.tls) keep net/http's Transport: a hand-written
// mutual-TLS client was tried before and is not worth its risk for the
// link's handshake costs.

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"syscall"
	"time"
)

// peerClient is a pool of HTTP/1.1 connections per peer address.
type peerClient struct {
	dial          func(ctx context.Context, network, addr string) (net.Conn, error)
	headerTimeout time.Duration
	idleTimeout   time.Duration
	maxIdle       int // per address

	mu       sync.Mutex
	idle     map[string][]*peerConn // most recently used last
	prunedAt time.Time
}

func newPeerClient(dialTimeout, headerTimeout time.Duration) *peerClient {
	return &peerClient{
		dial:          (&net.Dialer{Timeout: dialTimeout}).DialContext,
		headerTimeout: headerTimeout, idleTimeout: peerIdleTimeout, maxIdle: peerIdleConns,
		idle: map[string][]*peerConn{},
	}
}

// peerConn is one connection with its buffers: 4 KiB each way, as
// net/http's Transport keeps (uncharged, per pooled connection; a body
// read in larger pieces bypasses the read buffer).
type peerConn struct {
	conn   net.Conn
	br     *bufio.Reader
	bw     *bufio.Writer
	addr   string
	idleAt time.Time
}

// errPeerClosedIdle marks a failure on a reused connection before any
// byte of the answer: the peer had closed it while it was idle.
var errPeerClosedIdle = errors.New("cluster: peer closed an idle connection")

// Do sends req (its URL's host is the peer's address) and returns the
// answer, whose body the caller must close.
func (pc *peerClient) Do(req *http.Request) (*http.Response, error) {
	addr := req.URL.Host
	c, reused, err := pc.get(req.Context(), addr, true)
	if err != nil {
		return nil, err
	}
	resp, err := pc.roundTrip(req, c, reused)
	if err == nil || !errors.Is(err, errPeerClosedIdle) {
		return resp, err
	}
	// The peer closed the connection while it was idle: it has most
	// likely closed every other one it had from us too (it restarted, or
	// shut down its listener), so the pool to it is dropped and the
	// request goes once more on a new connection.
	pc.dropIdle(addr)
	if req.Body != nil && req.Body != http.NoBody {
		if req.GetBody == nil {
			return nil, err // the body was spent on the closed connection
		}
		if req.Body, err = req.GetBody(); err != nil {
			return nil, err
		}
	}
	if c, _, err = pc.get(req.Context(), addr, false); err != nil {
		return nil, err
	}
	return pc.roundTrip(req, c, false)
}

// get takes an idle connection to addr (when pooled allows it), or dials
// one.
func (pc *peerClient) get(ctx context.Context, addr string, pooled bool) (*peerConn, bool, error) {
	if pooled {
		now := time.Now()
		pc.mu.Lock()
		for l := pc.idle[addr]; len(l) > 0; l = pc.idle[addr] {
			c := l[len(l)-1]
			pc.idle[addr] = l[:len(l)-1]
			if now.Sub(c.idleAt) < pc.idleTimeout {
				pc.mu.Unlock()
				return c, true, nil
			}
			_ = c.conn.Close()
		}
		pc.mu.Unlock()
	}
	conn, err := pc.dial(ctx, "tcp", addr)
	if err != nil {
		return nil, false, fmt.Errorf("cluster: peer %s: %w", addr, err)
	}
	return &peerConn{conn: conn, br: bufio.NewReaderSize(conn, 4<<10), bw: bufio.NewWriterSize(conn, 4<<10), addr: addr}, false, nil
}

// put returns a connection whose last answer was read to the end. Now
// and then it also closes the connections that sat idle too long, for
// every address (a peer that moved or left has nobody taking them).
func (pc *peerClient) put(c *peerConn) {
	now := time.Now()
	c.idleAt = now
	var expired []*peerConn
	pc.mu.Lock()
	if len(pc.idle[c.addr]) < pc.maxIdle {
		pc.idle[c.addr] = append(pc.idle[c.addr], c)
		c = nil
	}
	if now.Sub(pc.prunedAt) >= pc.idleTimeout/4 {
		pc.prunedAt = now
		for addr, l := range pc.idle {
			kept := l[:0]
			for _, ic := range l {
				if now.Sub(ic.idleAt) < pc.idleTimeout {
					kept = append(kept, ic)
				} else {
					expired = append(expired, ic)
				}
			}
			if len(kept) == 0 {
				delete(pc.idle, addr)
			} else {
				pc.idle[addr] = kept
			}
		}
	}
	pc.mu.Unlock()
	if c != nil {
		expired = append(expired, c)
	}
	for _, ic := range expired {
		_ = ic.conn.Close()
	}
}

// dropIdle closes every pooled connection to addr.
func (pc *peerClient) dropIdle(addr string) {
	pc.mu.Lock()
	l := pc.idle[addr]
	delete(pc.idle, addr)
	pc.mu.Unlock()
	for _, c := range l {
		_ = c.conn.Close()
	}
}

// requestDeadline sets a connection's deadline for one request, and
// expires it for good when the request's context ends (which unblocks a
// read or write in progress). Both under one lock, so that a deadline
// set after the cancellation cannot undo it.
type requestDeadline struct {
	mu        sync.Mutex
	conn      net.Conn
	cancelled bool
	stopFn    func() bool
}

func watchDeadline(ctx context.Context, conn net.Conn) *requestDeadline {
	d := &requestDeadline{conn: conn}
	d.stopFn = context.AfterFunc(ctx, func() {
		d.mu.Lock()
		defer d.mu.Unlock()
		d.cancelled = true
		_ = d.conn.SetDeadline(time.Unix(1, 0))
	})
	return d
}

// set moves the deadline, unless the request was cancelled.
func (d *requestDeadline) set(t time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.cancelled {
		_ = d.conn.SetDeadline(t)
	}
}

// stop ends the watch; it reports whether the cancellation can no longer
// touch the connection. Its own flag is not enough: the cancellation may
// have started without having taken the lock yet, and would then expire
// the deadline of a connection already back in the pool (the next
// request on it failed with a timeout at once).
func (d *requestDeadline) stop() bool {
	return d.stopFn()
}

// roundTrip writes req on c and reads the answer's header. Only a failure
// before the answer's first byte on a reused connection is errPeerClosedIdle.
func (pc *peerClient) roundTrip(req *http.Request, c *peerConn, reused bool) (*http.Response, error) {
	ctx := req.Context()
	if err := ctx.Err(); err != nil {
		pc.put(c)
		return nil, err
	}
	dl := watchDeadline(ctx, c.conn)
	fail := func(err error, beforeAnswer bool) (*http.Response, error) {
		dl.stop()
		_ = c.conn.Close()
		if ctxErr := ctx.Err(); ctxErr != nil {
			return nil, fmt.Errorf("cluster: peer %s: %w", c.addr, ctxErr)
		}
		if reused && beforeAnswer && isClosedIdle(err) {
			return nil, fmt.Errorf("%w: %s: %w", errPeerClosedIdle, c.addr, err)
		}
		return nil, fmt.Errorf("cluster: peer %s: %w", c.addr, err)
	}
	// A write that fails on a reused connection, other than by its
	// deadline, is the peer having closed it: net/http wraps a body's
	// failed write in an error without Unwrap (a review's
	// TestAPurgeOfEverythingWithManyIDsIsSentAgainAfterAClosedIdleConnection),
	// so it is not read for its cause.
	failWrite := func(err error) (*http.Response, error) {
		var ne net.Error
		if timedOut := errors.As(err, &ne) && ne.Timeout(); reused && ctx.Err() == nil && !timedOut {
			err = fmt.Errorf("%w (%w)", io.EOF, err)
		}
		return fail(err, true)
	}
	dl.set(time.Now().Add(pc.headerTimeout))
	if err := req.Write(c.bw); err != nil {
		return failWrite(err)
	}
	if err := c.bw.Flush(); err != nil {
		return failWrite(err)
	}
	// The first byte apart: ReadResponse reports a connection closed
	// before the status line as ErrUnexpectedEOF, the same as one cut
	// inside it, and only the first may be retried.
	if _, err := c.br.Peek(1); err != nil {
		return fail(err, true)
	}
	var resp *http.Response
	for {
		var err error
		if resp, err = http.ReadResponse(c.br, req); err != nil {
			return fail(err, false)
		}
		// An informational answer (100 Continue, 103 Early Hints) is
		// followed by the real one, as net/http's Transport skips them.
		if resp.StatusCode >= 200 || resp.StatusCode == http.StatusSwitchingProtocols {
			break
		}
	}
	dl.set(time.Time{}) // the body's pace is the caller's (peerBodyIdle)
	keep := !resp.Close && !req.Close && resp.StatusCode != http.StatusSwitchingProtocols
	b := &peerBody{body: resp.Body, c: c, pc: pc, dl: dl, keep: keep}
	if resp.Body == http.NoBody {
		b.finish(true)
		return resp, nil
	}
	resp.Body = b
	return resp, nil
}

// isClosedIdle reports whether err is what a connection the peer closed
// while idle gives before any byte of the answer.
func isClosedIdle(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// peerBody is an answer's body; at its end the connection goes back to
// the pool, on Close before it the connection is closed.
type peerBody struct {
	body io.ReadCloser
	c    *peerConn
	pc   *peerClient
	dl   *requestDeadline
	keep bool

	mu   sync.Mutex
	done bool
}

func (b *peerBody) Read(p []byte) (int, error) {
	n, err := b.body.Read(p)
	if err != nil {
		b.finish(errors.Is(err, io.EOF))
	}
	return n, err
}

// finish releases the connection once: back to the pool when the answer
// was read to its end, the context was not cancelled and neither side
// asked to close; closed otherwise.
func (b *peerBody) finish(atEOF bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.done {
		return
	}
	b.done = true
	notCancelled := b.dl.stop()
	// A byte buffered past the answer's end would be read as the next
	// request's answer: a peer that sent one is not talked to again on
	// this connection.
	if atEOF && b.keep && notCancelled && b.c.br.Buffered() == 0 {
		b.pc.put(b.c)
		return
	}
	_ = b.c.conn.Close()
}

func (b *peerBody) Close() error {
	b.finish(false)
	return nil
}
