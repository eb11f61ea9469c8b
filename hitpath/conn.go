// Package hitpath answers the fresh cache hits of HTTP/1.1 connections
// (the plain listener's, the TLS listener's that negotiated HTTP/1.1:
// node/tlshit.go, and the cluster listener's signed peer requests:
// cluster/peerhit.go, with Config.KeepFields) without net/http's per-request machinery (a header map, a URL, a
// context, a background-read goroutine, a cloned and sorted response
// header), each in one write from a head serialised once per entry.
// docs/benchmarks.md has the profile that justified it: with edge's own
// work at zero, net/http alone reached only 0.69× nginx's hit rate.
//
// net/http still owns every connection. Listener wraps each accepted
// connection in a Conn whose Read is where net/http waits for its next
// request. While net/http waits, Read reads requests itself and answers
// those the cache serves as plain fresh hits; the first request it does
// not answer is what Read returns to net/http, which serves it as always.
//   - A GET or HEAD without a body that needs ServeHTTP (a miss, a
//     conditional, a Range…) is handed over head only, and the connection
//     comes back to the loop when net/http has answered it (the
//     http.Server's ConnState hook reports that).
//   - Anything else (another method or version, a body, Expect, Upgrade,
//     bytes net/http has its own rules for) stays with net/http for the
//     rest of the connection, with every byte already read.
//
// So net/http judges every malformed, hostile or unusual request, and the
// loop only needs to be right about the narrow set it frames itself
// (parse.go, checked against net/http by a fuzz target).
//
// No maintained library does this: fasthttp and similar servers replace
// net/http whole, which would take HTTP/1.1 framing, limits and error
// handling away from the code the conformance and hostile-client tests
// hold to account.
package hitpath

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// Answerer answers a request the loop read, or declines it.
type Answerer interface {
	// AppendHit fills a with the response to r, its Head appended to
	// dst, or returns false: the request then goes to net/http. date is
	// the current "Date: …\r\n" line; remote is the client's address.
	// r's slices are valid only during the call.
	AppendHit(dst []byte, r *Request, date []byte, remote net.Addr, a *Answer) bool
}

// Answer is a response to write.
type Answer struct {
	// Head is written first: the status line and fields, and a small
	// body.
	Head []byte
	// Body, if any, is written with the head in one vectored write, at
	// most ChunkBytes of it, then in writes of at most ChunkBytes, the
	// write timeout renewed before each (as net/http's handler writes).
	// It is not copied: the answerer keeps it valid until Release.
	Body []byte
	// Release, if set, is called with the answer when the writes are
	// done (Ref and RefKey are the answerer's own, for it). A method
	// value made once, not per answer, keeps hits free of allocations.
	Release func(*Answer)
	Ref     any
	RefKey  string
}

// VectorWriter is a connection that sends several buffers in one system
// call (node's write-batching connection). A *net.TCPConn does so through
// net.Buffers itself.
type VectorWriter interface {
	WriteBuffers(bufs net.Buffers) (int64, error)
}

// ChunkBytes is the largest write of a body after the head: a client must
// take this much per write timeout.
const ChunkBytes = 32 << 10

// Config are the loop's timeouts, the http.Server's own; a zero one takes
// DefaultConfig's (never none).
type Config struct {
	// IdleTimeout bounds the wait for the next request after a hit
	// (limits.idle_timeout).
	IdleTimeout time.Duration
	// ReadHeaderTimeout bounds the rest of a request head once its first
	// bytes arrived in an earlier read (limits.read_header_timeout).
	ReadHeaderTimeout time.Duration
	// WriteTimeout bounds each hit's write (limits.write_timeout).
	WriteTimeout time.Duration
	// StripFields are request fields the cache deletes before it looks
	// at a request (forwarding.strip_headers): the loop ignores them too.
	StripFields []string
	// UnkeyedFields are fields the operator declares do not change the
	// representation (forwarding.unkeyed_headers): the loop answers
	// requests carrying them, as the cache does not key them.
	UnkeyedFields []string
	// KeepFields makes the loop give the answerer every field line
	// (Request.Fields), for requests it must read whole: the cluster
	// listener's signed peer requests (package cluster, peerhit.go).
	KeepFields bool
	// AnswererFields, with KeepFields, are fields the answerer reads and
	// judges itself, which therefore never make the loop hand a request
	// over (a peer probe's Cache-Control: only-if-cached, the
	// X-Forwarded-Proto a trusted peer writes). Every other field is
	// judged as on a client's request.
	AnswererFields []string
	// Skip, if set, names connections the loop leaves to net/http from
	// the start: on a TLS listener, those that negotiated HTTP/2 (net/http
	// must see their *tls.Conn to serve HTTP/2).
	Skip func(net.Conn) bool
}

// DefaultConfig returns the loop's timeouts when the server gives none.
// A zero timeout is net/http's "no limit", which the loop never runs with:
// a client could then hold a connection and its buffer forever.
func DefaultConfig() Config {
	return Config{IdleTimeout: time.Minute, ReadHeaderTimeout: time.Minute, WriteTimeout: time.Minute}
}

// readBufferBytes holds the request heads the loop reads. A larger head
// goes to net/http, which allows at least this much under any
// limits.max_header_bytes (its limit is that value plus 4096).
const readBufferBytes = 4 << 10

// Listener wraps accepted connections in Conn. The http.Server that
// serves it must call ConnState from its ConnState hook.
type Listener struct {
	net.Listener
	cfg      Config
	rules    *fieldRules // cfg's field lists, lower-case
	ans      Answerer
	metrics  *Metrics
	draining atomic.Bool
	dates    Dates
	outPool  sync.Pool

	mu    sync.Mutex
	conns map[*Conn]struct{} // open connections, for Drain

	writing atomic.Int64 // responses being written, for WaitWrites
	// abandon: the stop's deadline passed (WaitWrites' context ended);
	// hits still being written stop after their chunk in flight.
	abandon atomic.Bool
}

// Dates makes the Date field line once per second (the zero value is
// ready); every front that answers hits shares its way of writing it.
type Dates struct{ cur atomic.Pointer[dateLine] }

// dateLine is the Date field of one second.
type dateLine struct {
	unix int64
	line []byte
}

// NewListener returns ln with the hit path on its connections. The
// http.Server that serves it must call ConnState from its hook and must
// not set ReadTimeout: net/http starts that clock when it begins waiting
// for a request, which includes the hits the loop answers meanwhile
// (ReadHeaderTimeout, IdleTimeout and WriteTimeout are fine).
func NewListener(ln net.Listener, cfg Config, ans Answerer, m *Metrics) *Listener {
	def := DefaultConfig()
	for _, d := range []struct{ v, def *time.Duration }{{&cfg.IdleTimeout, &def.IdleTimeout},
		{&cfg.ReadHeaderTimeout, &def.ReadHeaderTimeout}, {&cfg.WriteTimeout, &def.WriteTimeout}} {
		if *d.v <= 0 {
			*d.v = *d.def
		}
	}
	if m == nil {
		m = NewMetrics(nil)
	}
	l := &Listener{Listener: ln, cfg: cfg, ans: ans, metrics: m, conns: make(map[*Conn]struct{}),
		rules: loopRules(cfg)}
	l.outPool.New = func() any { b := make([]byte, 0, 8<<10); return &b }
	return l
}

// errReadTimeout refuses a server the loop cannot serve correctly.
var errReadTimeout = errors.New("hitpath: the http.Server must not set ReadTimeout (its clock would include the hits the loop answers); use ReadHeaderTimeout")

// Serve serves l with srv: it hooks ConnState (keeping srv's own hook)
// and refuses a server with ReadTimeout.
func (l *Listener) Serve(srv *http.Server) error {
	if srv.ReadTimeout > 0 {
		return errReadTimeout
	}
	if prev := srv.ConnState; prev != nil {
		srv.ConnState = func(c net.Conn, st http.ConnState) { l.ConnState(c, st); prev(c, st) }
	} else {
		srv.ConnState = l.ConnState
	}
	return srv.Serve(l)
}

// Accept implements net.Listener.
func (l *Listener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	if l.cfg.Skip != nil && l.cfg.Skip(c) {
		return c, nil
	}
	l.metrics.open.Add(1)
	hc := &Conn{Conn: c, l: l, rb: make([]byte, readBufferBytes), abort: make(chan struct{}, 1), accepted: time.Now()}
	if tc, ok := c.(*tls.Conn); ok {
		hc.sni = tc.ConnectionState().ServerName // the handshake is done: the listener hands over such conns after it
	}
	l.mu.Lock()
	l.conns[hc] = struct{}{}
	l.mu.Unlock()
	return hc, nil
}

// ConnState must be called from the http.Server's ConnState hook: when
// net/http has answered a request the loop handed it, the connection's
// next request is the loop's again.
func (l *Listener) ConnState(c net.Conn, st http.ConnState) {
	hc, ok := c.(*Conn)
	if !ok {
		return
	}
	switch st {
	case answeredState:
		hc.state.CompareAndSwap(stateHanded, stateLoop)
	case http.StateHijacked:
		// The handler owns the connection now (net/http ended its
		// background read first): it reads what the loop holds, then
		// the socket.
		hc.state.Store(stateForeign)
		fallthrough
	case http.StateClosed:
		if hc.counted.CompareAndSwap(false, true) {
			l.metrics.open.Add(-1)
			l.mu.Lock()
			delete(l.conns, hc)
			l.mu.Unlock()
		}
	}
}

// Drain makes the loop answer no more requests, and ends the connections
// it is waiting on: net/http's Shutdown sees a connection that only ever
// had hits as new, and would wait 5 s before closing it. A request in
// flight on the loop is answered first. Call it before
// http.Server.Shutdown.
func (l *Listener) Drain() {
	l.draining.Store(true)
	l.mu.Lock()
	defer l.mu.Unlock()
	for c := range l.conns {
		if c.state.Load() == stateLoop {
			// The loop sets its deadlines before it looks at draining,
			// so this past one either ends its read or comes first.
			_ = c.Conn.SetReadDeadline(time.Unix(1, 0))
		}
	}
}

// WaitWrites waits until no hit is being written, or ctx ends. net/http's
// Shutdown takes a connection the loop is writing on for idle, so the node
// waits here too before it exits.
//
// A hit being written when net/http closes its connection is written to
// its end (each chunk within limits.write_timeout), as net/http finishes
// the answers in progress; when ctx ends first, the writes still going
// stop after their chunk in flight and their connections close.
func (l *Listener) WaitWrites(ctx context.Context) error {
	t := time.NewTicker(5 * time.Millisecond)
	defer t.Stop()
	for l.writing.Load() > 0 {
		select {
		case <-ctx.Done():
			l.abandonWrites()
			return ctx.Err()
		case <-t.C:
		}
	}
	return nil
}

// abandonWrites stops the hits still being written at the stop's
// deadline: a slow reader must not keep its connection past it.
func (l *Listener) abandonWrites() {
	l.abandon.Store(true)
	var writing []*Conn
	l.mu.Lock()
	for c := range l.conns {
		c.wmu.Lock()
		if c.writing {
			writing = append(writing, c)
		}
		c.wmu.Unlock()
	}
	l.mu.Unlock()
	// Closed outside the locks: a TLS connection caught between two
	// chunks sends its close_notify, which may wait on a full socket.
	// Whether or not net/http closed it (a connection that only ever had
	// hits is "new" to net/http for 5 s, and not closed by its Shutdown
	// before that; a review), a write blocked on a slow reader returns
	// at once and the next chunk is not written.
	for _, c := range writing {
		_ = c.Conn.Close()
	}
}

// The owner of a connection's next bytes.
const (
	stateLoop    int32 = iota // the loop reads the next request
	stateHanded               // net/http serves the head the loop handed it
	stateForeign              // net/http, for the rest of the connection
)

// Conn is an accepted connection with the hit path in its Read. net/http
// reads from one goroutine at a time (its connection goroutine, or the
// background read while a handler runs), so the read state needs no lock.
type Conn struct {
	net.Conn
	l       *Listener
	state   atomic.Int32
	counted atomic.Bool // the open-connections gauge was decremented

	rb         []byte // bytes read and not yet answered or given to net/http: rb[start:end]
	start, end int
	owed       int // in stateHanded: bytes of the handed head net/http has not read yet
	partial    bool
	// accepted is when the connection came; heads counts the requests
	// whose head was complete (answered or handed). The first head must
	// be whole read_header_timeout after accepted, as net/http has it, not
	// after its first bytes (a client trickling them from just before the
	// timeout had twice as long; a review's slowloris); later heads
	// within it of their first bytes (net/http's Peek before its timer).
	accepted time.Time
	heads    int
	headBy   time.Time // the deadline of the head being read, once set
	req      Request
	sni      string        // the TLS connection's server name, given to each request
	ans      Answer        // the answer being written (one at a time; a field, so that it does not escape per hit)
	readErr  error         // a read error held back from net/http until the bytes before it are served
	aborted  atomic.Bool   // net/http ended its background read (a past read deadline)
	abort    chan struct{} // wakes hold when net/http ends its background read

	wmu      sync.Mutex // guards writing and closed
	writing  bool
	closed   bool
	closeLat atomic.Bool // closed during a write: the write stops after its chunk
}

// Read implements net.Conn: it is where net/http waits for requests.
func (c *Conn) Read(p []byte) (int, error) {
	switch c.state.Load() {
	case stateForeign:
		if c.start < c.end {
			return c.give(p, c.end), nil
		}
		if c.readErr != nil {
			err := c.readErr
			c.readErr = nil
			return 0, err
		}
		return c.Conn.Read(p)
	case stateHanded:
		if c.owed > 0 {
			n := c.give(p, c.start+c.owed)
			c.owed -= n
			return n, nil
		}
		return c.hold(p)
	}
	return c.serve(p)
}

// give copies rb[start:limit] into p, as far as it fits.
func (c *Conn) give(p []byte, limit int) int {
	n := copy(p, c.rb[c.start:limit])
	c.start += n
	return n
}

// serve answers requests until one is net/http's, and returns its bytes.
func (c *Conn) serve(p []byte) (int, error) {
	l := c.l
	for {
		if c.start == c.end {
			if err := c.readHead(); err != nil {
				return 0, err
			}
		}
		headLen, res, reason := parse(c.rb[c.start:c.end], &c.req, l.rules)
		c.req.ServerName = c.sni
		if l.draining.Load() && res != foreign {
			res, reason = foreign, "" // net/http closes it as it shuts down
		}
		switch res {
		case incomplete:
			if n, err, done := c.readRest(p); done {
				return n, err
			}
			continue
		case answerable:
			answered, err := c.answer()
			if err != nil {
				// A failed write: net/http only needs to close (an EOF
				// makes it close without writing an error response).
				return 0, io.EOF
			}
			if answered {
				c.start += headLen
				c.partial = false
				c.heads++
				if c.req.Close {
					return 0, io.EOF // net/http closes the connection, writing nothing
				}
				if c.start == c.end {
					_ = c.Conn.SetReadDeadline(time.Now().Add(l.cfg.IdleTimeout))
				}
				continue
			}
			reason = reasonNotHit
			fallthrough
		case handable:
			return c.hand(p, headLen, reason), nil
		default:
			if reason != "" {
				l.metrics.passed(reason, true)
			}
			return c.giveForGood(p), nil
		}
	}
}

// readHead reads the start of the next request into the empty buffer.
// An error is what net/http's read gets: the connection ends.
func (c *Conn) readHead() error {
	c.start, c.end = 0, 0
	if c.l.draining.Load() {
		return io.EOF // net/http closes the connection
	}
	if c.readErr != nil {
		err := c.readErr
		c.readErr = nil
		return err
	}
	n, err := c.Conn.Read(c.rb)
	if n == 0 {
		if err == nil {
			err = io.ErrNoProgress
		}
		return err
	}
	c.end = n // an error that came with bytes returns on the next read
	return nil
}

// readRest reads more of a head that is not whole yet. done says the
// read is over for net/http: n bytes of p (a head too large for the loop,
// given to net/http for good) or err.
func (c *Conn) readRest(p []byte) (n int, err error, done bool) {
	l := c.l
	if c.start > 0 {
		c.end = copy(c.rb, c.rb[c.start:c.end])
		c.start = 0
	}
	if c.end == len(c.rb) {
		l.metrics.passed(reasonTooLarge, true)
		return c.giveForGood(p), nil, true
	}
	if !c.partial {
		// The rest of this head must come within the header timeout,
		// however it trickles in.
		c.partial = true
		c.headBy = c.headDeadline()
		_ = c.Conn.SetReadDeadline(c.headBy)
	}
	if l.draining.Load() {
		return 0, io.EOF, true
	}
	if c.readErr != nil {
		err := c.readErr
		c.readErr = nil
		return 0, err, true
	}
	n, err = c.Conn.Read(c.rb[c.end:])
	if n == 0 {
		if c.end > c.start && err != nil {
			// A head cut short (its deadline, the client gone): net/http
			// reads what came and then the error, and answers as it
			// would alone (a 400 for a line it cannot parse; a review
			// found the loop closing silently where net/http answers).
			c.readErr = err
			return c.giveForGood(p), nil, true
		}
		return 0, err, true
	}
	c.end += n
	return 0, nil, false
}

// hand gives net/http the head of headLen bytes alone; the bytes after
// it wait for the loop, which gets the connection back once net/http has
// answered (ConnState reports StateIdle).
func (c *Conn) hand(p []byte, headLen int, reason string) int {
	c.l.metrics.passed(reason, false)
	c.partial = false
	c.heads++
	// net/http may end its background read before that read's goroutine
	// even starts: the abort is armed here, once per handed request,
	// never in hold.
	c.aborted.Store(false)
	select {
	case <-c.abort:
	default:
	}
	c.state.Store(stateHanded)
	c.owed = headLen
	n := c.give(p, c.start+c.owed)
	c.owed -= n
	return n
}

// giveForGood leaves the connection to net/http with the bytes read so
// far. The head may be incomplete (and a body follows): its rest must come
// within the header timeout, which net/http would have set when it started
// reading and which the loop's own idle deadline may have replaced.
func (c *Conn) giveForGood(p []byte) int {
	c.state.Store(stateForeign)
	by := c.headBy
	if !c.partial {
		by = c.headDeadline()
	}
	_ = c.Conn.SetReadDeadline(by)
	return c.give(p, c.end)
}

// headDeadline is when the head now begun must be whole: the first
// within read_header_timeout of the connection's start, a later one of
// its first bytes (now).
func (c *Conn) headDeadline() time.Time {
	if c.heads == 0 {
		return c.accepted.Add(c.l.cfg.ReadHeaderTimeout)
	}
	return time.Now().Add(c.l.cfg.ReadHeaderTimeout)
}

// hold is net/http's background read while it serves a handed request: it
// watches for the client closing. Bytes that arrive meanwhile (a
// pipelined request) stay with the loop, which reads them once net/http
// is done; hold returns only when the connection fails, or when net/http
// ends the read (by a past deadline, whose timeout it expects).
//
// An error that net/http should not see yet waits in readErr: net/http's
// own background read stops at the first pipelined byte, so a client that
// sends a request and then half-closes has its earlier request answered
// in full. hold then waits for net/http to end the read, and reports the
// timeout it expects.
func (c *Conn) hold(p []byte) (int, error) {
	for {
		if c.start == c.end {
			c.start, c.end = 0, 0
		} else if c.end == len(c.rb) && c.start > 0 {
			c.end = copy(c.rb, c.rb[c.start:c.end])
			c.start = 0
		}
		if c.end == len(c.rb) {
			// More pipelined bytes than the buffer holds: net/http takes
			// them and the connection, as it would have without the loop.
			c.l.metrics.passed(reasonTooLarge, true)
			c.state.Store(stateForeign)
			return c.give(p, c.end), nil
		}
		if c.readErr != nil {
			<-c.abort
			return 0, os.ErrDeadlineExceeded
		}
		n, err := c.Conn.Read(c.rb[c.end:])
		c.end += n
		if err == nil {
			continue
		}
		var ne net.Error
		switch {
		case errors.As(err, &ne) && ne.Timeout() && c.aborted.Load():
			return 0, err // net/http's own abort
		case errors.As(err, &ne) && ne.Timeout():
			// Not net/http's deadline (Drain's): wait for net/http.
			<-c.abort
			return 0, os.ErrDeadlineExceeded
		case c.start == c.end:
			return 0, err // the client left: net/http cancels the request
		default:
			c.readErr = err // after the pipelined requests before it
		}
	}
}

// SetReadDeadline implements net.Conn. A deadline in the past while
// net/http serves a handed request is net/http ending its background read
// (abortPendingRead): hold must return then.
//
// net/http's abort uses a deadline long past (time.Unix(1, 0)); only such a
// deadline counts, so that another past deadline (an http.Server
// ReadTimeout, which this listener does not support: see NewListener) is
// not taken for it.
func (c *Conn) SetReadDeadline(t time.Time) error {
	if c.state.Load() == stateHanded && isNetHTTPAbort(t) {
		// Before the deadline itself: hold, woken by it, must find
		// that it was net/http's.
		c.aborted.Store(true)
		select {
		case c.abort <- struct{}{}:
		default:
		}
	}
	return c.Conn.SetReadDeadline(t)
}

// errClosed is a hit's write on a connection net/http closed meanwhile.
var errClosed = errors.New("hitpath: connection closed")

// answer writes the answerer's response to the parsed request, or reports
// that it declined. An error means the connection is done.
func (c *Conn) answer() (bool, error) {
	l := c.l
	op := l.outPool.Get().(*[]byte)
	defer l.outPool.Put(op)
	a := &c.ans
	*a = Answer{}
	if !l.ans.AppendHit((*op)[:0], &c.req, l.dateLine(), c.RemoteAddr(), a) {
		return false, nil
	}
	defer func() {
		if a.Release != nil {
			a.Release(a)
		}
		*a = Answer{} // holds no entry or buffer until the next hit
	}()
	*op = a.Head[:0] // keeps a grown buffer for the next response
	l.metrics.answered.Add(1)
	c.wmu.Lock()
	if c.closed {
		c.wmu.Unlock()
		return true, errClosed
	}
	c.writing = true
	c.wmu.Unlock()
	l.writing.Add(1)
	err := c.write(a)
	l.writing.Add(-1)
	c.wmu.Lock()
	c.writing = false
	closeNow := c.closeLat.Load()
	c.wmu.Unlock()
	if closeNow {
		_ = c.Conn.Close()
		return true, errClosed
	}
	return true, err
}

// write sends a's head with the first chunk of its body in one vectored
// write, then the rest chunk by chunk, each within the write timeout.
func (c *Conn) write(a *Answer) error {
	_ = c.SetWriteDeadline(time.Now().Add(c.l.cfg.WriteTimeout))
	body := a.Body
	if len(body) == 0 {
		_, err := c.Write(a.Head)
		return err
	}
	n := min(len(body), ChunkBytes)
	bufs := net.Buffers{a.Head, body[:n]}
	var err error
	if vw, ok := c.Conn.(VectorWriter); ok {
		_, err = vw.WriteBuffers(bufs)
	} else {
		_, err = bufs.WriteTo(c.Conn) // one writev on a *net.TCPConn
	}
	// A Close during the write (net/http's Shutdown, which takes the
	// connection for idle) lets it finish; the stop's deadline
	// (abandonWrites) ends it after the chunk in flight.
	for body = body[n:]; err == nil && len(body) > 0 && !c.l.abandon.Load(); body = body[n:] {
		n = min(len(body), ChunkBytes)
		_ = c.SetWriteDeadline(time.Now().Add(c.l.cfg.WriteTimeout))
		_, err = c.Write(body[:n])
	}
	return err
}

// Close implements net.Conn. net/http's Shutdown closes connections it
// sees idle, which includes one the loop is writing a hit on: that one
// closes when the write is done, so no response is cut short (until the
// stop's deadline: WaitWrites). Before 2026-12-06 the write stopped after
// its chunk in flight, and a large hit was cut off halfway by every
// graceful stop (a review).
func (c *Conn) Close() error {
	c.wmu.Lock()
	if c.writing {
		c.closeLat.Store(true)
		c.wmu.Unlock()
		return nil
	}
	c.closed = true
	c.wmu.Unlock()
	select { // a hold waiting for net/http's abort ends with the connection
	case c.abort <- struct{}{}:
	default:
	}
	return c.Conn.Close()
}

// CloseWrite half-closes the connection when it can, as net/http does
// before a graceful close.
func (c *Conn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// dateLine returns "Date: <now>\r\n", made once per second.
func (l *Listener) dateLine() []byte { return l.dates.Line(time.Now()) }

// Line returns "Date: <now>\r\n"; the slice must not be changed.
func (d *Dates) Line(now time.Time) []byte {
	if cur := d.cur.Load(); cur != nil && cur.unix == now.Unix() {
		return cur.line
	}
	n := &dateLine{unix: now.Unix()}
	n.line = append(now.UTC().AppendFormat([]byte("Date: "), http.TimeFormat), "\r\n"...)
	d.cur.Store(n)
	return n.line
}
