package node

import (
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// netHTTPBufferSize is the size of net/http's per-connection write buffer.
// A write of exactly this size is net/http flushing a full buffer in the
// middle of a response (for a 4 KiB object: the header plus the start of the
// body), so more bytes of the same response follow at once.
const netHTTPBufferSize = 4 << 10

// tlsFullRecords are the sizes of the TLS record that carries a full
// net/http buffer: 4096 bytes of plaintext plus the record's framing,
// 5 + 1 + 16 in TLS 1.3 (AES-GCM or ChaCha20-Poly1305), 5 + 8 + 16 with
// TLS 1.2's AES-GCM and 5 + 16 with its ChaCha20-Poly1305. Under TLS the
// batching works on records: crypto/tls writes each record with its own
// system call.
var tlsFullRecords = []int{netHTTPBufferSize + 22, netHTTPBufferSize + 29, netHTTPBufferSize + 21}

// plainFull is the plain listener's full-buffer write.
var plainFull = []int{netHTTPBufferSize}

// defaultHoldLimit bounds how long held bytes may wait for the write that
// follows: net/http writes the rest at once, so 1 ms is never reached on a
// healthy machine and bounds the damage on a stalled one.
const defaultHoldLimit = time.Millisecond

// batchStats counts what the batching does, for metrics and tests.
type batchStats struct {
	sends  atomic.Int64 // write system calls issued (a writev counts once)
	merged atomic.Int64 // held buffers sent together with the following write
}

// batchListener wraps accepted connections in batchConn.
type batchListener struct {
	net.Listener
	stats *batchStats
	hold  time.Duration // 0: defaultHoldLimit
	full  []int         // write sizes that mean "a full buffer, more follows" (nil: plainFull)
}

func (l batchListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	hold := l.hold
	if hold <= 0 {
		hold = defaultHoldLimit
	}
	full := l.full
	if full == nil {
		full = plainFull
	}
	return &batchConn{Conn: c, stats: l.stats, hold: hold, full: full}, nil
}

// batchConn turns net/http's "full buffer, then the rest" pair of write
// system calls into one writev: it holds a write of exactly the buffer size
// and sends it together with the next write. Held bytes are sent no later
// than the next Write, CloseWrite or Close, or the hold limit after they
// were held.
//
// Only writes take writeMu. Read never waits for a write (HTTP/2 reads
// PINGs and WINDOW_UPDATEs while a slow write is blocked), and Close does
// not wait for a write that a client which stopped reading has blocked:
// closing the socket is what ends such a write.
type batchConn struct {
	net.Conn
	writeMu sync.Mutex            // serialises writes and flushes, in order
	held    []byte                // guarded by writeMu
	timer   *time.Timer           // guarded by writeMu
	err     atomic.Pointer[error] // a write error of held bytes, reported by the next call
	stats   *batchStats
	hold    time.Duration
	full    []int
}

// vectored is the connection to hand net.Buffers to: net's writev works
// only on its own types, so a wrapper that changes only reads (the cluster
// listener's prefixConn) is looked through. Without it a "merged" write
// was two system calls (a hostile review's strace).
func (c *batchConn) vectored() net.Conn {
	if u, ok := c.Conn.(interface{ WriteConn() net.Conn }); ok {
		return u.WriteConn()
	}
	return c.Conn
}

func (c *batchConn) loadErr() error {
	if p := c.err.Load(); p != nil {
		return *p
	}
	return nil
}

func (c *batchConn) Write(p []byte) (int, error) {
	c.writeMu.Lock()
	defer c.writeMu.Unlock()
	if err := c.loadErr(); err != nil {
		return 0, err
	}
	if len(c.held) > 0 {
		bufs := net.Buffers{c.held, p}
		c.stats.sends.Add(1)
		c.stats.merged.Add(1)
		n, err := bufs.WriteTo(c.vectored())
		held := int64(len(c.held))
		c.held = c.held[:0]
		c.timer.Stop()
		written := int(max(n-held, 0))
		return written, err
	}
	if slices.Contains(c.full, len(p)) {
		if c.held == nil {
			c.held = make([]byte, 0, len(p))
			c.timer = time.AfterFunc(c.hold, c.flushTimer)
		} else {
			c.timer.Reset(c.hold)
		}
		c.held = append(c.held, p...)
		return len(p), nil
	}
	c.stats.sends.Add(1)
	return c.Conn.Write(p)
}

// WriteBuffers sends held bytes and bufs in one writev, never holding
// any: the hit path's head and body (hitpath.VectorWriter).
func (c *batchConn) WriteBuffers(bufs net.Buffers) (int64, error) {
	c.writeMu.Lock()
	defer c.writeMu.Unlock()
	if err := c.loadErr(); err != nil {
		return 0, err
	}
	c.stats.sends.Add(1)
	if len(c.held) > 0 {
		c.stats.merged.Add(1)
		bufs = append(net.Buffers{c.held}, bufs...)
		held := int64(len(c.held))
		n, err := bufs.WriteTo(c.vectored())
		c.held = c.held[:0]
		c.timer.Stop()
		return max(n-held, 0), err
	}
	return bufs.WriteTo(c.vectored())
}

// flushLocked sends held bytes; c.writeMu must be held.
func (c *batchConn) flushLocked() error {
	if len(c.held) == 0 {
		return c.loadErr()
	}
	c.stats.sends.Add(1)
	_, err := c.Conn.Write(c.held)
	c.held = c.held[:0]
	c.timer.Stop()
	if err != nil {
		c.err.CompareAndSwap(nil, &err)
	}
	return c.loadErr()
}

// flushTimer sends bytes held for the hold limit. It waits for writeMu:
// the timer can fire before the Write that held the bytes has returned (a
// busy machine preempts it), and giving up then would leave them held with
// no write to follow. A write blocked by a stalled client holds writeMu
// until Close ends it; this goroutine waits that long, then finds nothing
// to send (or an error).
func (c *batchConn) flushTimer() {
	c.writeMu.Lock()
	defer c.writeMu.Unlock()
	_ = c.flushLocked()
}

// Read has held bytes sent now when it is net/http waiting for the next
// request: it reads the next request only after the last write of the
// previous response, so a response whose last write filled the buffer
// exactly (a 4 KiB body streamed after its header: every such miss and
// peer hop) would otherwise wait for the hold limit with nothing to follow.
//
//   - It does not write itself: it fires the hold timer at once, and the
//     timer's goroutine sends. A client that stopped reading then blocks
//     that goroutine, not this Read, so net/http's idle timeout (a read
//     deadline) still ends the connection, and Close ends the write.
//   - Only reads of more than one byte count: the background read net/http
//     starts while a handler runs reads one byte, and it may come between
//     the held buffer and the rest of the same response.
//   - It does not wait for a write in progress (HTTP/2 reads PINGs and
//     WINDOW_UPDATEs while a slow write is blocked): that write sends the
//     held bytes itself.
func (c *batchConn) Read(p []byte) (int, error) {
	if err := c.loadErr(); err != nil {
		return 0, err
	}
	if len(p) > 1 && c.writeMu.TryLock() {
		if len(c.held) > 0 {
			c.timer.Reset(0)
		}
		c.writeMu.Unlock()
	}
	return c.Conn.Read(p)
}

// CloseWrite flushes and half-closes, which net/http uses for a graceful
// close (from the connection's own goroutine, after its writes).
func (c *batchConn) CloseWrite() error {
	c.writeMu.Lock()
	err := c.flushLocked()
	c.writeMu.Unlock()
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		if e := cw.CloseWrite(); err == nil {
			err = e
		}
	}
	return err
}

// closeFlushLimit bounds how long Close tries to send held bytes to a
// client that may have stopped reading.
const closeFlushLimit = time.Second

// Close sends held bytes if no write is under way (within closeFlushLimit),
// then closes the socket, which also ends a write a stalled client blocks.
func (c *batchConn) Close() error {
	if c.writeMu.TryLock() {
		if len(c.held) > 0 {
			_ = c.SetWriteDeadline(time.Now().Add(closeFlushLimit))
			_ = c.flushLocked()
		}
		if c.timer != nil {
			c.timer.Stop()
		}
		c.writeMu.Unlock()
	}
	return c.Conn.Close()
}
