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
//     request before any answer arrives: it is retried once on a new
//     connection (every peer request is safe to repeat: reads, a purge);
//   - a connection goes back to the pool only after its answer was read to
//     the end, and neither side asked to close it;
//   - cancelling the request's context (a suspicion of the peer, the
//     client gone) unblocks the read at once by expiring the connection's
//     deadline, and the connection is not reused;
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

	mu   sync.Mutex
	idle map[string][]*peerConn // most recently used last
}

func newPeerClient(dialTimeout, headerTimeout time.Duration) *peerClient {
	return &peerClient{
		dial:          (&net.Dialer{Timeout: dialTimeout}).DialContext,
		headerTimeout: headerTimeout, idleTimeout: peerIdleTimeout, maxIdle: peerIdleConns,
		idle: map[string][]*peerConn{},
	}
}

// peerConn is one connection with its buffers.
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
	for attempt := 0; ; attempt++ {
		conn, reused, err := pc.get(req.Context(), req.URL.Host)
		if err != nil {
			return nil, err
		}
		resp, err := pc.roundTrip(req, conn, reused)
		if err == nil {
			return resp, nil
		}
		if attempt > 0 || !errors.Is(err, errPeerClosedIdle) {
			return nil, err
		}
		if req.Body != nil && req.Body != http.NoBody {
			if req.GetBody == nil {
				return nil, err // the body was spent on the closed connection
			}
			if req.Body, err = req.GetBody(); err != nil {
				return nil, err
			}
		}
	}
}

// get takes an idle connection to addr, or dials one.
func (pc *peerClient) get(ctx context.Context, addr string) (*peerConn, bool, error) {
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
	conn, err := pc.dial(ctx, "tcp", addr)
	if err != nil {
		return nil, false, fmt.Errorf("cluster: peer %s: %w", addr, err)
	}
	return &peerConn{conn: conn, br: bufio.NewReaderSize(conn, 32<<10), bw: bufio.NewWriterSize(conn, 4<<10), addr: addr}, false, nil
}

// put returns a connection whose last answer was read to the end.
func (pc *peerClient) put(c *peerConn) {
	c.idleAt = time.Now()
	pc.mu.Lock()
	if len(pc.idle[c.addr]) < pc.maxIdle {
		pc.idle[c.addr] = append(pc.idle[c.addr], c)
		c = nil
	}
	pc.mu.Unlock()
	if c != nil {
		_ = c.conn.Close()
	}
}

// CloseIdleConnections closes every pooled connection.
func (pc *peerClient) CloseIdleConnections() {
	pc.mu.Lock()
	idle := pc.idle
	pc.idle = map[string][]*peerConn{}
	pc.mu.Unlock()
	for _, l := range idle {
		for _, c := range l {
			_ = c.conn.Close()
		}
	}
}

// roundTrip writes req on c and reads the answer's header.
func (pc *peerClient) roundTrip(req *http.Request, c *peerConn, reused bool) (*http.Response, error) {
	ctx := req.Context()
	if err := ctx.Err(); err != nil {
		pc.put(c)
		return nil, err
	}
	// Cancelling the context expires the deadline, which unblocks a read
	// or write in progress; stop() reports whether that happened.
	stop := context.AfterFunc(ctx, func() { _ = c.conn.SetDeadline(time.Unix(1, 0)) })
	fail := func(err error) (*http.Response, error) {
		stop()
		_ = c.conn.Close()
		if ctxErr := ctx.Err(); ctxErr != nil {
			return nil, fmt.Errorf("cluster: peer %s: %w", c.addr, ctxErr)
		}
		if reused && isClosedIdle(err) {
			return nil, fmt.Errorf("%w: %w", errPeerClosedIdle, err)
		}
		return nil, fmt.Errorf("cluster: peer %s: %w", c.addr, err)
	}
	_ = c.conn.SetDeadline(time.Now().Add(pc.headerTimeout))
	if err := req.Write(c.bw); err != nil {
		return fail(err)
	}
	if err := c.bw.Flush(); err != nil {
		return fail(err)
	}
	// The first byte apart: ReadResponse reports a connection closed
	// before the status line as ErrUnexpectedEOF, the same as one cut
	// inside it, and only the first may be retried.
	if _, err := c.br.Peek(1); err != nil {
		return fail(err)
	}
	var resp *http.Response
	for {
		var err error
		if resp, err = http.ReadResponse(c.br, req); err != nil {
			return fail(err)
		}
		// An informational answer (100 Continue, 103 Early Hints) is
		// followed by the real one, as net/http's Transport skips them.
		if resp.StatusCode >= 200 || resp.StatusCode == http.StatusSwitchingProtocols {
			break
		}
	}
	_ = c.conn.SetDeadline(time.Time{}) // the body's pace is the caller's (peerBodyIdle)
	b := &peerBody{body: resp.Body, c: c, pc: pc, stop: stop, keep: !resp.Close && !req.Close}
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
	stop func() bool
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
	notCancelled := b.stop()
	if atEOF && b.keep && notCancelled {
		b.pc.put(b.c)
		return
	}
	_ = b.c.conn.Close()
}

func (b *peerBody) Close() error {
	b.finish(false)
	return nil
}
