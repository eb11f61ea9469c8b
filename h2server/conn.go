package h2server

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/edgecache/edge/hitpath"
)

// conn is one HTTP/2 connection. Its read loop (serve) is the only reader;
// writes come from the loop (control frames, hits) and from handler
// goroutines, each under wmu, into one buffer flushed when the loop has
// read everything the client sent or a handler ends a response.
type conn struct {
	srv     *Server
	nc      net.Conn
	handler http.Handler
	ctx     context.Context
	cancel  context.CancelFunc
	remote  string
	tls     *tls.ConnectionState

	br *bufio.Reader
	fr *http2.Framer // reads on the loop; writes under wmu

	// The write side, under wmu.
	wmu  sync.Mutex
	bw   *bufio.Writer // nil between flushes (pooled)
	henc *hpack.Encoder
	hbuf bytes.Buffer
	werr error // the first write error: the connection is done
	// flushQueued: a goroutine waits to flush for the loop (the loop
	// found the buffer held by a writer).
	flushQueued atomic.Bool
	wdead       time.Time // the write deadline last set
	goAwayID    uint32    // the last stream ID a GOAWAY sent allowed (0: none sent)
	sentGA      bool

	// Streams and flow control, under mu. cond wakes writers waiting for
	// send window (and for a stream's end).
	mu            sync.Mutex
	cond          sync.Cond
	streams       map[uint32]*stream
	maxClientID   uint32
	sendWindow    int64  // what the client lets us send on the connection
	peerWindow    int64  // SETTINGS_INITIAL_WINDOW_SIZE of the client
	peerMaxFrame  int    // SETTINGS_MAX_FRAME_SIZE of the client
	settingsGen   uint64 // counts SETTINGS of the window or frame size: a reservation made under an older one is made again
	recvWindow    int64  // what the client may still send on the connection
	recvUnacked   int64  // body bytes consumed and not yet returned by WINDOW_UPDATE
	running       int    // handler goroutines, reset streams' included
	draining      bool   // GOAWAY sent or asked: no new streams
	graced        bool   // closeGracefully set the read deadline: nothing may undo it
	ready         bool   // the handshake is over (both SETTINGS): a drain may send GOAWAY
	closed        bool
	idleSince     time.Time
	idleTimer     *time.Timer
	handlers      sync.WaitGroup
	internStrings map[string]string   // response field values, interned (loop only)
	hitFieldsBuf  []hpack.HeaderField // answerHit's fields (loop only)
	hitAns        hitpath.Answer      // answerHit's answer (loop only; a field, so that it does not escape per hit)
	// resetIDs are the streams this server reset last (a ring): frames the
	// client sent on them before it saw the reset are ignored (RFC 9113
	// §5.1), not taken as errors that end the connection.
	resetIDs  [32]uint32
	resetNext int
}

// errConnClosed is what a writer gets once the connection is gone.
var errConnClosed = errors.New("h2server: connection closed")

// errStreamClosed is what a writer gets once its stream was reset.
var errStreamClosed = errors.New("h2server: stream closed")

var writerPool = sync.Pool{New: func() any { return bufio.NewWriterSize(nil, writeBufferBytes) }}

func newConn(ctx context.Context, s *Server, nc net.Conn, h http.Handler) *conn {
	c := &conn{srv: s, nc: nc, handler: h, remote: nc.RemoteAddr().String(),
		streams: map[uint32]*stream{}, sendWindow: 65535, peerWindow: 65535, peerMaxFrame: 16384,
		recvWindow: 65535, internStrings: map[string]string{}}
	c.cond.L = &c.mu
	if tc, ok := nc.(*tls.Conn); ok {
		st := tc.ConnectionState()
		c.tls = &st
	}
	c.ctx, c.cancel = context.WithCancel(ctx)
	c.br = bufio.NewReaderSize(nc, readBufferBytes)
	c.fr = http2.NewFramer(connWriter{c}, c.br)
	c.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	c.fr.MaxHeaderListSize = s.maxHeaderList()
	c.fr.SetMaxReadFrameSize(16384) // the default we advertise
	c.henc = hpack.NewEncoder(&c.hbuf)
	return c
}

// connWriter lets the framer write into the pooled buffer (under wmu).
type connWriter struct{ c *conn }

func (w connWriter) Write(p []byte) (int, error) {
	c := w.c
	if c.werr != nil {
		return 0, c.werr
	}
	if c.bw == nil {
		c.bw = writerPool.Get().(*bufio.Writer)
		c.bw.Reset(deadlineWriter{c})
	}
	return c.bw.Write(p)
}

// deadlineWriter renews the connection's write deadline before each write
// to the socket (at most every quarter of the timeout or every second, to
// spare the timer): a client that stops reading holds a write for about
// WriteTimeout, then loses the connection.
type deadlineWriter struct{ c *conn }

func (w deadlineWriter) Write(p []byte) (int, error) {
	c := w.c
	if t := c.srv.WriteTimeout; t > 0 {
		if d := time.Now().Add(t); d.Sub(c.wdead) > min(time.Second, t/4) {
			_ = c.nc.SetWriteDeadline(d)
			c.wdead = d
		}
	}
	n, err := c.nc.Write(p)
	if err != nil && c.werr == nil {
		c.werr = err
	}
	return n, err
}

// flushLocked sends the buffer; wmu is held.
func (c *conn) flushLocked() error {
	if c.bw == nil {
		return c.werr
	}
	err := c.bw.Flush()
	c.bw.Reset(nil)
	writerPool.Put(c.bw)
	c.bw = nil
	if err != nil {
		c.fail(err)
	}
	return err
}

func (c *conn) flush() error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	return c.flushLocked()
}

// fail ends the connection after a write error: the loop's read fails and
// the loop cleans up.
func (c *conn) fail(err error) {
	if c.werr == nil {
		c.werr = err
	}
	_ = c.nc.Close()
}

// serve runs the read loop.
func (c *conn) serve() {
	m := c.srv.Metrics
	if m != nil {
		m.conns.Inc()
		defer m.conns.Dec()
	}
	defer c.shutdown()
	_ = c.nc.SetReadDeadline(time.Now().Add(c.srv.headerTimeout()))
	if err := c.readPreface(); err != nil {
		c.srv.log().Debug("http2 preface", "remote", c.remote, "err", err)
		return
	}
	c.wmu.Lock()
	_ = c.fr.WriteSettings(
		http2.Setting{ID: http2.SettingMaxConcurrentStreams, Val: c.srv.maxStreams()},
		http2.Setting{ID: http2.SettingInitialWindowSize, Val: streamRecvWindow},
		http2.Setting{ID: http2.SettingMaxHeaderListSize, Val: c.srv.maxHeaderList()},
	)
	_ = c.fr.WriteWindowUpdate(0, connRecvWindow-65535)
	err := c.flushLocked()
	c.wmu.Unlock()
	if err != nil {
		return
	}
	c.mu.Lock()
	c.recvWindow = connRecvWindow
	c.mu.Unlock()

	// The client's first frame must be SETTINGS (RFC 9113 §3.4).
	f, err := c.fr.ReadFrame()
	if err != nil {
		c.readError(err)
		return
	}
	if sf, ok := f.(*http2.SettingsFrame); !ok || sf.IsAck() {
		c.goAway(http2.ErrCodeProtocol, "first frame is not SETTINGS")
		return
	} else if err := c.onSettings(sf); err != nil {
		c.connError(err)
		return
	}
	_ = c.nc.SetReadDeadline(time.Time{})
	c.mu.Lock()
	c.ready = true
	drainAsked := c.draining
	c.mu.Unlock()
	if drainAsked {
		// Drained during the handshake: its GOAWAY and grace wait for
		// now, after our SETTINGS (the server's first frame, RFC 9113
		// §3.4) and after the deadline above, which would have undone
		// the grace and left the connection open for good.
		c.drain()
	}
	c.startIdle()

	for {
		if c.br.Buffered() == 0 {
			// Everything the client sent is handled: send the answers
			// before waiting for more. A writer that holds the buffer
			// (a handler, or a write the client is not reading) flushes
			// it from a goroutine: the loop must go on reading, to see
			// the client's resets, window updates and its going away.
			if c.wmu.TryLock() {
				err := c.flushLocked()
				c.wmu.Unlock()
				if err != nil {
					return
				}
			} else if c.flushQueued.CompareAndSwap(false, true) {
				// One waiting flusher at most: it sends whatever the
				// buffer holds when it gets it.
				go func() {
					c.wmu.Lock()
					c.flushQueued.Store(false) // what the loop writes from now on waits for a flush of its own
					_ = c.flushLocked()
					c.wmu.Unlock()
				}()
			}
		}
		bounded := c.boundHeaderBlock()
		f, err := c.fr.ReadFrame()
		if bounded {
			c.unboundHeaderBlock()
		}
		if err != nil {
			if !c.readError(err) {
				return
			}
			continue
		}
		if err := c.onFrame(f); err != nil {
			if !c.frameError(err) {
				return
			}
		}
	}
}

func (c *conn) readPreface() error {
	buf := make([]byte, len(http2.ClientPreface))
	if _, err := io.ReadFull(c.br, buf); err != nil {
		return err
	}
	if string(buf) != http2.ClientPreface {
		return errors.New("bad client preface")
	}
	return nil
}

// readError handles an error of ReadFrame; it reports whether the loop
// goes on (a stream error).
func (c *conn) readError(err error) bool {
	var se http2.StreamError
	var ce http2.ConnectionError
	switch {
	case errors.As(err, &se):
		return c.frameError(se)
	case errors.As(err, &ce):
		c.connError(ce)
		return false
	case errors.Is(err, http2.ErrFrameTooLarge):
		c.goAway(http2.ErrCodeFrameSize, "frame too large")
		return false
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		c.srv.log().Debug("http2 read timeout", "remote", c.remote)
	}
	return false
}

// frameError answers an error of a frame's handling: a stream error resets
// the stream and the loop goes on; a connection error ends it.
func (c *conn) frameError(err error) bool {
	var se http2.StreamError
	if errors.As(err, &se) {
		c.srv.Metrics.countError(true)
		c.resetStream(se.StreamID, se.Code)
		return true
	}
	c.connError(err)
	return false
}

func (c *conn) connError(err error) {
	var ce http2.ConnectionError
	code := http2.ErrCodeProtocol
	if errors.As(err, &ce) {
		code = http2.ErrCode(ce)
	}
	c.goAway(code, err.Error())
}

// goAway sends GOAWAY with an error code; the loop's caller then returns
// and the connection closes.
func (c *conn) goAway(code http2.ErrCode, why string) {
	c.mu.Lock()
	last := c.maxClientID
	c.mu.Unlock()
	c.goAwayLast(code, why, last)
}

// goAwayLast sends GOAWAY naming last as the last stream the server takes.
func (c *conn) goAwayLast(code http2.ErrCode, why string, last uint32) {
	if code != http2.ErrCodeNo {
		c.srv.Metrics.countError(false)
	}
	c.srv.log().Debug("http2 GOAWAY", "remote", c.remote, "code", code.String(), "why", why)
	c.wmu.Lock()
	if !c.sentGA || code != http2.ErrCodeNo {
		c.sentGA, c.goAwayID = true, last
		_ = c.fr.WriteGoAway(last, code, nil)
	}
	_ = c.flushLocked()
	c.wmu.Unlock()
}

// shutdown ends every stream and closes the connection, after the loop.
func (c *conn) shutdown() {
	c.mu.Lock()
	c.closed = true
	for _, st := range c.streams {
		st.resetLocked(errConnClosed)
	}
	if c.idleTimer != nil {
		c.idleTimer.Stop()
	}
	c.cond.Broadcast()
	c.mu.Unlock()
	c.cancel()
	if c.wmu.TryLock() { // a writer stuck on a client that reads nothing ends with the Close below
		_ = c.flushLocked()
		c.wmu.Unlock()
		if cw, ok := c.nc.(interface{ CloseWrite() error }); ok {
			_ = cw.CloseWrite()
		}
	}
	_ = c.nc.Close()
	c.handlers.Wait()
	c.wmu.Lock()
	if c.bw != nil {
		c.bw.Reset(nil)
		writerPool.Put(c.bw)
		c.bw = nil
	}
	c.wmu.Unlock()
}

// drain sends GOAWAY: the streams already open are answered, no new one
// is taken, and the connection closes when the last one ends.
func (c *conn) drain() {
	c.mu.Lock()
	c.draining = true
	if !c.ready {
		c.mu.Unlock()
		return // serve drains once the handshake is over
	}
	idle := len(c.streams) == 0
	last := c.maxClientID // with draining set: a later HEADERS is ignored, and not covered
	c.mu.Unlock()
	c.goAwayLast(http2.ErrCodeNo, "server draining", last)
	if idle {
		c.closeGracefully()
	}
}

// goAwayGrace is how long a connection that has sent GOAWAY(NO_ERROR) and
// has no stream left keeps reading before it closes: requests the client
// sent before it saw the GOAWAY are read and ignored (it retries them on a
// new connection), not answered with a reset connection (net/http waits
// as long).
const goAwayGrace = time.Second

// closeGracefully ends the connection after goAwayGrace: the read loop
// reads on until its deadline, then closes.
func (c *conn) closeGracefully() {
	_ = c.flush()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.graced = true // the header block's bound must not undo this deadline
	_ = c.nc.SetReadDeadline(time.Now().Add(goAwayGrace))
}

// boundHeaderBlock waits for the next frame to begin and bounds its
// reading by ReadHeaderTimeout when it starts a request head (HEADERS,
// whose CONTINUATIONs ReadFrame reads with it), as net/http bounds an
// HTTP/1.1 head: a review found a head trickled (a HEADERS frame without
// END_HEADERS, its CONTINUATION never sent) holding the connection until
// IdleTimeout, twelve times longer; and a second, a frame header sent but
// for its last byte, which the first fix waited for without a bound. So
// a frame header that has begun is due within the bound too. It reports
// whether it set a deadline.
func (c *conn) boundHeaderBlock() bool {
	if _, err := c.br.Peek(1); err != nil {
		return false // idle until a frame begins; ReadFrame reports the error
	}
	bounded := false
	if c.br.Buffered() < frameHeaderLen {
		bounded = c.setHeaderDeadline() // a frame header split: its rest is due promptly
	}
	hdr, err := c.br.Peek(frameHeaderLen)
	if err != nil {
		return bounded
	}
	if http2.FrameType(hdr[3]) != http2.FrameHeaders {
		if bounded {
			c.unboundHeaderBlock()
		}
		return false
	}
	return bounded || c.setHeaderDeadline()
}

// setHeaderDeadline sets the read deadline ReadHeaderTimeout from now and
// reports true, unless the connection is closing (its grace's shorter
// deadline stands).
func (c *conn) setHeaderDeadline() bool {
	return c.readDeadlineUnlessGraced(time.Now().Add(c.srv.headerTimeout()))
}

// unboundHeaderBlock ends boundHeaderBlock's deadline, unless the
// connection has begun to close meanwhile (its grace deadline stands).
func (c *conn) unboundHeaderBlock() { c.readDeadlineUnlessGraced(time.Time{}) }

// readDeadlineUnlessGraced sets the read deadline to t and reports true,
// unless closeGracefully has set its own, which nothing may undo.
func (c *conn) readDeadlineUnlessGraced(t time.Time) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.graced {
		return false
	}
	_ = c.nc.SetReadDeadline(t)
	return true
}

// frameHeaderLen is the length of an HTTP/2 frame header (RFC 9113 §4.1).
const frameHeaderLen = 9

// startIdle arms the idle timer, if the server has an idle timeout.
func (c *conn) startIdle() {
	t := c.srv.IdleTimeout
	if t <= 0 {
		return
	}
	c.mu.Lock()
	c.idleSince = time.Now()
	c.idleTimer = time.AfterFunc(t, c.onIdleTimer)
	c.mu.Unlock()
}

// onIdleTimer closes the connection if it has had no stream for
// IdleTimeout, else waits for the rest.
func (c *conn) onIdleTimer() {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	if len(c.streams) > 0 || c.idleSince.IsZero() {
		c.idleTimer.Reset(c.srv.IdleTimeout)
		c.mu.Unlock()
		return
	}
	if left := c.srv.IdleTimeout - time.Since(c.idleSince); left > 0 {
		c.idleTimer.Reset(left)
		c.mu.Unlock()
		return
	}
	c.draining = true
	last := c.maxClientID
	c.mu.Unlock()
	c.goAwayLast(http2.ErrCodeNo, "idle", last)
	c.closeGracefully()
}

// onFrame handles one frame on the loop.
func (c *conn) onFrame(f http2.Frame) error {
	switch f := f.(type) {
	case *http2.MetaHeadersFrame:
		return c.onHeaders(f)
	case *http2.DataFrame:
		return c.onData(f)
	case *http2.SettingsFrame:
		if f.IsAck() {
			return nil
		}
		return c.onSettings(f)
	case *http2.WindowUpdateFrame:
		return c.onWindowUpdate(f)
	case *http2.PingFrame:
		if f.IsAck() {
			return nil
		}
		c.wmu.Lock()
		err := c.fr.WritePing(true, f.Data)
		c.wmu.Unlock()
		return err
	case *http2.RSTStreamFrame:
		return c.onReset(f)
	case *http2.PriorityFrame:
		if f.StreamDep == f.StreamID {
			return http2.StreamError{StreamID: f.StreamID, Code: http2.ErrCodeProtocol}
		}
		return nil
	case *http2.GoAwayFrame:
		// The client opens no more streams; those open are answered.
		return nil
	case *http2.PushPromiseFrame:
		return http2.ConnectionError(http2.ErrCodeProtocol) // clients do not push
	}
	return nil // unknown frame types are ignored (RFC 9113 §4.1)
}

func (c *conn) onSettings(f *http2.SettingsFrame) error {
	// The changes are applied and the ACK written under wmu: a writer woken
	// by a larger window writes its DATA after the ACK, never before it. RFC
	// 9113 §6.5.3 asks for the ACK "immediately", and a client that waits
	// for the ACK before it reads DATA (h2spec 6.9.2/1 does) would drop
	// a DATA frame that overtook it. wmu is taken before mu, as
	// writeBlockLocked takes them.
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if err := f.ForeachSetting(func(s http2.Setting) error {
		if err := s.Valid(); err != nil {
			return err
		}
		switch s.ID {
		case http2.SettingHeaderTableSize:
			c.henc.SetMaxDynamicTableSize(s.Val)
		case http2.SettingInitialWindowSize:
			c.mu.Lock()
			defer c.mu.Unlock()
			c.settingsGen++
			delta := int64(s.Val) - c.peerWindow
			c.peerWindow = int64(s.Val)
			for _, st := range c.streams {
				if st.sendWindow+delta > 1<<31-1 {
					return http2.ConnectionError(http2.ErrCodeFlowControl)
				}
				st.sendWindow += delta
			}
			c.cond.Broadcast()
		case http2.SettingMaxFrameSize:
			c.mu.Lock()
			c.settingsGen++
			c.peerMaxFrame = int(s.Val)
			c.mu.Unlock()
		}
		return nil
	}); err != nil {
		return err
	}
	return c.fr.WriteSettingsAck()
}

func (c *conn) onWindowUpdate(f *http2.WindowUpdateFrame) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if f.StreamID == 0 {
		if f.Increment == 0 {
			return http2.ConnectionError(http2.ErrCodeProtocol)
		}
		if c.sendWindow+int64(f.Increment) > 1<<31-1 {
			return http2.ConnectionError(http2.ErrCodeFlowControl)
		}
		c.sendWindow += int64(f.Increment)
		c.cond.Broadcast()
		return nil
	}
	st := c.streams[f.StreamID]
	if st == nil {
		if f.StreamID > c.maxClientID {
			return http2.ConnectionError(http2.ErrCodeProtocol) // an idle stream
		}
		return nil // a closed stream: allowed (RFC 9113 §6.9)
	}
	if f.Increment == 0 {
		return http2.StreamError{StreamID: f.StreamID, Code: http2.ErrCodeProtocol}
	}
	if st.sendWindow+int64(f.Increment) > 1<<31-1 {
		return http2.StreamError{StreamID: f.StreamID, Code: http2.ErrCodeFlowControl}
	}
	st.sendWindow += int64(f.Increment)
	c.cond.Broadcast()
	return nil
}

func (c *conn) onReset(f *http2.RSTStreamFrame) error {
	c.mu.Lock()
	st := c.streams[f.StreamID]
	if st == nil {
		idle := f.StreamID > c.maxClientID
		// The client has closed the stream too: what it sends on it from
		// now on is an error, not a frame it sent before it saw our reset.
		for i, r := range c.resetIDs {
			if r == f.StreamID {
				c.resetIDs[i] = 0
			}
		}
		c.mu.Unlock()
		if idle {
			return http2.ConnectionError(http2.ErrCodeProtocol)
		}
		return nil
	}
	st.remoteDone, st.localDone = true, true
	st.resetLocked(errStreamClosed)
	c.removeLocked(st)
	c.mu.Unlock()
	c.wmu.Lock()
	st.writesClosed = true // a handler still running sends nothing more on it
	c.wmu.Unlock()
	return nil
}

// resetStream sends RST_STREAM for id and forgets the stream.
func (c *conn) resetStream(id uint32, code http2.ErrCode) {
	c.mu.Lock()
	st := c.streams[id]
	if st != nil {
		st.remoteDone, st.localDone = true, true
		st.resetLocked(errStreamClosed)
		c.removeLocked(st)
	}
	c.resetIDs[c.resetNext] = id
	c.resetNext = (c.resetNext + 1) % len(c.resetIDs)
	c.mu.Unlock()
	c.wmu.Lock()
	if st != nil {
		st.writesClosed = true
	}
	_ = c.fr.WriteRSTStream(id, code)
	c.wmu.Unlock()
}

// resetByUsLocked reports whether this server reset stream id lately; mu
// is held.
func (c *conn) resetByUsLocked(id uint32) bool {
	for _, r := range c.resetIDs {
		if r == id && id != 0 {
			return true
		}
	}
	return false
}

// removeLocked forgets a stream both sides have ended; mu is held.
func (c *conn) removeLocked(st *stream) {
	if c.streams[st.id] != st {
		return
	}
	delete(c.streams, st.id)
	if st.body != nil {
		// Bytes the handler never read are the connection's again; the
		// client may be waiting for them, so they are granted now (mu is
		// held here: the grant is sent from a goroutine of its own).
		if n := st.body.discard(); n > 0 {
			c.recvUnacked += n
			if c.windowDueLocked() && !c.closed {
				go c.returnWindow(nil, 0)
			}
		}
	}
	if len(c.streams) == 0 {
		c.idleSince = time.Now()
		if c.draining && !c.closed {
			go c.closeGracefully()
		}
	}
}

// windowDueLocked reports whether the connection's consumed bytes are to
// be granted again now: a quarter of the window has gathered, or the client
// has less than half of it left (one slow upload must not stall the
// others); mu is held.
func (c *conn) windowDueLocked() bool {
	return c.recvUnacked >= connRecvWindow/4 || (c.recvUnacked > 0 && c.recvWindow < connRecvWindow/2)
}

// returnWindow sends WINDOW_UPDATE for body bytes consumed (or discarded),
// once a quarter of a window has gathered: the client keeps sending
// without a frame per read.
func (c *conn) returnWindow(st *stream, n int64) {
	c.mu.Lock()
	c.recvUnacked += n
	var connInc, streamInc int64
	if c.recvUnacked > 0 && c.windowDueLocked() {
		connInc, c.recvUnacked = c.recvUnacked, 0
		c.recvWindow += connInc
	}
	if st != nil && !st.remoteDone {
		st.recvUnacked += n
		if st.recvUnacked >= streamRecvWindow/4 || st.body.empty() {
			streamInc, st.recvUnacked = st.recvUnacked, 0
			st.recvWindow += streamInc
		}
	}
	c.mu.Unlock()
	if connInc == 0 && streamInc == 0 {
		return
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if connInc > 0 {
		_ = c.fr.WriteWindowUpdate(0, uint32(connInc))
	}
	if streamInc > 0 && !st.writesClosed {
		_ = c.fr.WriteWindowUpdate(st.id, uint32(streamInc))
	}
	_ = c.flushLocked()
}

func (c *conn) onData(f *http2.DataFrame) error {
	id, n := f.StreamID, int64(f.Length)
	c.mu.Lock()
	if n > c.recvWindow {
		c.mu.Unlock()
		return http2.ConnectionError(http2.ErrCodeFlowControl)
	}
	c.recvWindow -= n
	st := c.streams[id]
	if st == nil || st.remoteDone {
		idle := st == nil && id > c.maxClientID
		ignore := st == nil && c.resetByUsLocked(id)
		c.mu.Unlock()
		c.returnWindow(nil, n) // the connection's share is returned at once
		switch {
		case idle:
			return http2.ConnectionError(http2.ErrCodeProtocol)
		case ignore:
			return nil // sent before the client saw our RST_STREAM
		}
		return http2.StreamError{StreamID: id, Code: http2.ErrCodeStreamClosed}
	}
	if n > st.recvWindow {
		c.mu.Unlock()
		c.returnWindow(nil, n) // counted against the connection all the same (RFC 9113 §6.9)
		return http2.StreamError{StreamID: id, Code: http2.ErrCodeFlowControl}
	}
	st.recvWindow -= n
	data := f.Data()
	st.received += int64(len(data))
	if st.declared >= 0 && (st.received > st.declared || f.StreamEnded() && st.received != st.declared) {
		c.mu.Unlock()
		c.returnWindow(nil, n)
		return http2.StreamError{StreamID: id, Code: http2.ErrCodeProtocol}
	}
	body := st.body
	c.mu.Unlock()
	if pad := n - int64(len(data)); pad > 0 {
		c.returnWindow(st, pad)
	}
	if len(data) > 0 && !body.write(data) {
		c.returnWindow(st, int64(len(data))) // the handler has stopped reading
	}
	if f.StreamEnded() {
		body.closeWithError(io.EOF, nil)
		st.endRemote()
	}
	return nil
}

// onHeaders opens a stream (or ends one with trailers).
func (c *conn) onHeaders(f *http2.MetaHeadersFrame) error {
	id := f.StreamID
	if id%2 != 1 {
		return http2.ConnectionError(http2.ErrCodeProtocol)
	}
	// A stream that depends on itself is a stream error (RFC 9113
	// §5.3.1), answered once its ID is recorded: the body the client
	// already sent on it must read as DATA on a reset stream, not on an
	// idle one (a connection error that took every other stream down).
	selfDependent := f.HasPriority() && f.Priority.StreamDep == id
	c.mu.Lock()
	if st := c.streams[id]; st != nil {
		c.mu.Unlock()
		if selfDependent {
			return http2.StreamError{StreamID: id, Code: http2.ErrCodeProtocol}
		}
		return c.onTrailers(st, f)
	}
	if id <= c.maxClientID {
		ignore := c.resetByUsLocked(id)
		c.mu.Unlock()
		if ignore {
			if !f.StreamEnded() || len(f.PseudoFields()) > 0 {
				// Not trailers at all: malformed whatever the stream's state.
				return http2.StreamError{StreamID: id, Code: http2.ErrCodeProtocol}
			}
			return nil // trailers sent before the client saw our RST_STREAM
		}
		return http2.ConnectionError(http2.ErrCodeStreamClosed) // a closed stream's ID
	}
	c.maxClientID = id
	switch {
	case c.draining:
		c.mu.Unlock()
		return nil // after GOAWAY: ignored, the client retries elsewhere
	case selfDependent:
		c.mu.Unlock()
		return http2.StreamError{StreamID: id, Code: http2.ErrCodeProtocol}
	case uint32(len(c.streams)) >= c.srv.maxStreams() || c.running >= resetHandlersFactor*int(c.srv.maxStreams()):
		c.mu.Unlock()
		return http2.StreamError{StreamID: id, Code: http2.ErrCodeRefusedStream}
	}
	c.mu.Unlock()

	rp, err := readRequestFields(f)
	if err != nil {
		return http2.StreamError{StreamID: id, Code: http2.ErrCodeProtocol, Cause: err}
	}
	st := &stream{c: c, id: id, declared: rp.declared, remoteDone: f.StreamEnded()}
	c.mu.Lock()
	st.sendWindow, st.recvWindow = c.peerWindow, streamRecvWindow
	c.streams[id] = st
	c.idleSince = time.Time{}
	c.mu.Unlock()
	if f.Truncated {
		// The header list is over the limit: 431, as net/http answers.
		return c.answerStatus(st, http.StatusRequestHeaderFieldsTooLarge)
	}
	if c.srv.Hits != nil && f.StreamEnded() && (rp.method == http.MethodGet || rp.method == http.MethodHead) {
		if c.answerHit(st, rp, f.RegularFields()) {
			return nil
		}
	}
	return c.runHandler(st, rp, f)
}

// onTrailers ends a stream's body with its trailers.
func (c *conn) onTrailers(st *stream, f *http2.MetaHeadersFrame) error {
	c.mu.Lock()
	done := st.remoteDone
	c.mu.Unlock()
	if done {
		return http2.StreamError{StreamID: st.id, Code: http2.ErrCodeStreamClosed}
	}
	if !f.StreamEnded() || len(f.PseudoFields()) > 0 {
		return http2.StreamError{StreamID: st.id, Code: http2.ErrCodeProtocol}
	}
	if st.declared >= 0 && st.received != st.declared {
		return http2.StreamError{StreamID: st.id, Code: http2.ErrCodeProtocol}
	}
	var trailer http.Header
	for _, hf := range f.RegularFields() {
		if trailer == nil {
			trailer = http.Header{}
		}
		trailer.Add(hf.Name, hf.Value) // Add canonicalises the name
	}
	st.body.closeWithError(io.EOF, trailer)
	st.endRemote()
	return nil
}

// answerStatus answers a stream with an empty response of code.
func (c *conn) answerStatus(st *stream, code int) error {
	c.wmu.Lock()
	err := c.writeHeadersLocked(st, code, []hpack.HeaderField{{Name: "content-length", Value: "0"}}, true)
	c.wmu.Unlock()
	st.endLocal()
	if !st.remoteDone {
		c.resetStream(st.id, http2.ErrCodeNo) // the request body is not wanted
	}
	return err
}

// writeHeadersLocked writes a HEADERS frame (and CONTINUATIONs) for st;
// wmu is held.
func (c *conn) writeHeadersLocked(st *stream, status int, fields []hpack.HeaderField, end bool) error {
	if st.writesClosed {
		return errStreamClosed
	}
	if c.werr != nil {
		return c.werr
	}
	c.hbuf.Reset()
	_ = c.henc.WriteField(hpack.HeaderField{Name: ":status", Value: statusText(status)})
	for _, hf := range fields {
		c.writeField(hf)
	}
	err := c.writeBlockLocked(st.id, c.hbuf.Bytes(), end)
	c.shrinkHeaderBuffer()
	return err
}

// writeField encodes hf into c.hbuf. A long value is written as a literal
// without indexing, bypassing the encoder (RFC 7541 §6.2.2: the dynamic
// table is untouched, so the peer's stays in step): the encoder keeps a
// scratch buffer of its largest field for the connection's life, and an
// answer with a 1 MiB field left each idle connection holding one (a
// review's TestS71InternedFieldValuesAreBoundedInBytes).
func (c *conn) writeField(hf hpack.HeaderField) {
	if len(hf.Value) <= internMaxBytes {
		_ = c.henc.WriteField(hf)
		return
	}
	b := c.hbuf.AvailableBuffer()
	b = append(b, 0) // literal without indexing, new name (a 4-bit prefix of 0)
	b = appendHpackInt(b, 7, uint64(len(hf.Name)))
	b = append(b, hf.Name...)
	b = appendHpackInt(b, 7, uint64(len(hf.Value))) // H bit 0: no Huffman coding
	b = append(b, hf.Value...)
	c.hbuf.Write(b)
}

// appendHpackInt appends v as an HPACK integer with an n-bit prefix whose
// other bits are 0 (RFC 7541 §5.1).
func appendHpackInt(b []byte, n uint, v uint64) []byte {
	max := uint64(1)<<n - 1
	if v < max {
		return append(b, byte(v))
	}
	b = append(b, byte(max))
	for v -= max; v >= 128; v >>= 7 {
		b = append(b, byte(v&0x7f|0x80))
	}
	return append(b, byte(v))
}

// keptHeaderBufferBytes is the largest header-block buffer a connection
// keeps between blocks.
const keptHeaderBufferBytes = 16 << 10

// shrinkHeaderBuffer lets an outsized header block's buffer go: kept, an
// answer with a 1 MiB field left every idle connection that carried it
// holding its size (TestS71InternedFieldValuesAreBoundedInBytes). The
// encoder writes into c.hbuf by address, so the field is replaced in
// place.
func (c *conn) shrinkHeaderBuffer() {
	if c.hbuf.Cap() > keptHeaderBufferBytes {
		c.hbuf = bytes.Buffer{}
	}
}

// writeBlockLocked sends an encoded header block in frames of the peer's
// size.
func (c *conn) writeBlockLocked(id uint32, block []byte, end bool) error {
	c.mu.Lock()
	max := c.peerMaxFrame
	c.mu.Unlock()
	first := true
	for first || len(block) > 0 {
		frag := block
		if len(frag) > max {
			frag = frag[:max]
		}
		block = block[len(frag):]
		var err error
		if first {
			err = c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: frag, EndStream: end, EndHeaders: len(block) == 0})
		} else {
			err = c.fr.WriteContinuation(id, len(block) == 0, frag)
		}
		if err != nil {
			return err
		}
		first = false
	}
	return nil
}

// statusText is a status code's three digits, without allocating for the
// common ones.
func statusText(code int) string {
	switch code {
	case 200:
		return "200"
	case 304:
		return "304"
	case 404:
		return "404"
	}
	return fmt.Sprintf("%03d", code)
}
