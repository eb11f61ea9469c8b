package proxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"
)

// A fill is one upstream fetch of one variant whose body every interested
// client reads as it arrives: one origin request, many readers, and a slow
// reader never slows the fetch or the other readers (they read a shared
// buffer at their own pace). The bytes a fill buffers are charged to the
// handler's buffer budget (limits.max_buffered_bytes).
//
// A fill whose response turns out larger than the largest storable object
// keeps only a window of bytes not yet read by every reader ("trimming"),
// so that its memory stays bounded whatever the body's length. When the
// window is full because a reader is behind, the rest of the body goes to
// a spill file (spool.go) that readers behind the window read at their own
// pace, so the pump keeps the upstream's pace and gives its upstream slot
// back when the body is in; with no spool, or once the spill is full, the
// pump waits for the slowest reader.
type fill struct {
	ready  chan struct{} // closed once the outcome below is set
	purges uint64        // the handler's purge count when the fill started
	waitAt fillWait      // its place in the wait order (waitorder.go); set before it is shared

	// The outcome, written before ready is closed and read-only after.
	entry  *Entry // the shared response; its Body is set when the fill completes
	shared bool   // waiters may be given entry (subject to their own checks)
	err    error  // the fetch failed before a response arrived
	// upstream is the Cache-Status of the cluster peer that answered
	// ("" for the origin), for waiters' answers as for the leader's.
	upstream string
	// peerBody: the body is still streaming from a cluster peer (neither
	// the origin's nor read whole), so the fill waits on that peer until
	// it ends, header or not (waitorder.go).
	peerBody bool

	mu      sync.Mutex
	changed chan struct{} // closed (and replaced) whenever the state below changes
	buf     []byte        // the body while it may still be kept whole (from offset 0)
	blocks  [][]byte      // a trimming fill's unread bytes, in blocks that are never rewritten
	base    int64         // stream offset of blocks[0][0]; 0 until trimming
	trim    bool          // not storable: drop what every reader has read
	why     reason        // why trimming: too-large or buffer-full
	whole   *Entry        // entry with its complete body, once done
	done    bool
	bodyErr error
	readers map[*fillReader]struct{}
	charged int64 // bytes charged to the buffer budget
	budget  budget
	// spool hands out the spill file (nil: none); sp is this fill's, from
	// the first time the window filled with a reader behind (then
	// spillEnd is the stream offset after its last byte), and noSpill
	// says one could not be opened.
	spool    *spooler
	sp       *spill
	spillEnd int64
	noSpill  bool
	// window is the unread bytes a trimming fill keeps in memory
	// (trimWindow if 0).
	window  int64
	bodyEnd func() // called once when the body ends, before waiters wake
	// commit is called with the whole entry (under mu) when the body ends
	// whole, before any reader sees the last bytes: a client that has
	// read a whole answer and asks again finds what the fill stored, not
	// a fill still in flight. What it returns (if not nil) runs once mu is
	// released: slow work that must not hold this fill's readers.
	commit func(whole *Entry) (after func())
}

// errFillAbandoned ends a trimming fill that every reader has left.
var errFillAbandoned = errors.New("proxy: every reader left a fill that cannot be stored")

// trimWindow is how many unread bytes a trimming fill keeps.
const trimWindow = 256 << 10

// blockSize is a trimming fill's unit of memory. A slice handed to a
// reader lies within one block, so a reader that stops mid-write pins one
// block, never the whole buffer; consumed blocks are dropped, not copied.
const blockSize = 32 << 10

// newFill starts a fill when the handler has seen purges purges, standing
// at w in the wait order.
func newFill(purges uint64, w fillWait) *fill {
	return &fill{purges: purges, waitAt: w, ready: make(chan struct{}), changed: make(chan struct{}), readers: map[*fillReader]struct{}{}}
}

// header is the answer's header once the outcome is known, else nil.
func (f *fill) header() http.Header {
	select {
	case <-f.ready:
		if f.entry != nil {
			return f.entry.Header
		}
	default:
	}
	return nil
}

// publish sets the outcome and wakes the waiters.
func (f *fill) publish(e *Entry, shared bool, err error) {
	f.entry, f.shared, f.err = e, shared, err
	close(f.ready)
}

// wait blocks until the outcome is known, ctx ends or timeout passes.
func (f *fill) wait(ctx context.Context, timeout time.Duration) error {
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-f.ready:
		return nil
	case <-t.C:
		return errCoalesceTimeout
	case <-ctx.Done():
		return ctx.Err()
	}
}

var errCoalesceTimeout = errors.New("proxy: timed out waiting for another request's fetch")

// notifyLocked wakes everyone waiting on a change; f.mu is held.
func (f *fill) notifyLocked() {
	close(f.changed)
	f.changed = make(chan struct{})
}

// budget is the buffer budget a fill charges (the Handler).
type budget interface {
	charge(n int64) bool // take n bytes if the budget has them
	force(n int64)       // take n bytes even beyond the budget (bounded windows)
	release(n int64)
}

// pumpChunkBytes is the most a pump reads from its upstream at a time.
const pumpChunkBytes = 32 << 10

// pumpChunks keeps pumps' read buffers: passed to an io.Reader, a buffer
// escapes to the heap, and one allocated and zeroed per miss was the
// largest allocation of a peer-answered page (BenchmarkPeerHop in
// ./cluster).
var pumpChunks = sync.Pool{New: func() any { return new([pumpChunkBytes]byte) }}

// pump copies the upstream body into the buffer until EOF or an error.
// limit is the largest body kept whole; final then holds the entry with
// its whole body, if there is one.
func (f *fill) pump(body io.Reader, sizeHint, limit int64, b budget) error {
	f.mu.Lock()
	f.budget = b
	if sizeHint > 0 && sizeHint <= limit && !f.trim {
		if b.charge(sizeHint) {
			f.charged = sizeHint
			f.buf = make([]byte, 0, sizeHint)
		} else {
			f.trim, f.why = true, whyBufferFull
		}
	}
	f.mu.Unlock()
	chunk := pumpChunks.Get().(*[pumpChunkBytes]byte)
	defer pumpChunks.Put(chunk)
	got := int64(0)
	for {
		if err := f.makeRoom(); err != nil {
			return f.finish(err)
		}
		n, err := body.Read(chunk[:])
		got += int64(n)
		if n > 0 {
			// Only the pump sets f.sp and writes the spill: the write
			// happens outside the lock, and the bytes count as spilled
			// (readable from the file) once spillEnd moves under it.
			spilled := f.sp != nil && f.sp.append(chunk[:n]) == nil
			f.mu.Lock()
			f.appendLocked(chunk[:n], limit)
			if spilled {
				f.spillEnd += int64(n)
			}
			if err == io.EOF || (err == nil && got == sizeHint) {
				// The last bytes and the end in one step, so that no
				// reader sees them before the entry is committed. A
				// body of known length ends with its last read over
				// HTTP/1.1; over HTTP/2 the end of the stream can come
				// later, but every declared byte is in (the transport
				// enforces the length).
				after := f.finishLocked(nil)
				f.mu.Unlock()
				if after != nil {
					after()
				}
				return nil
			}
			f.notifyLocked()
			f.mu.Unlock()
		}
		if err == io.EOF {
			return f.finish(nil)
		}
		if err != nil {
			return f.finish(err)
		}
	}
}

// appendLocked adds p to the body, switching to trimming when the body
// outgrows the storable limit or the budget.
func (f *fill) appendLocked(p []byte, limit int64) {
	if !f.trim && int64(len(f.buf))+int64(len(p)) > limit {
		f.startTrimLocked(whyTooLarge)
	}
	if !f.trim && len(f.buf)+len(p) > cap(f.buf) {
		grow := int64(max(2*cap(f.buf), len(f.buf)+len(p), 4096)) - int64(cap(f.buf))
		if f.budget.charge(grow) {
			f.charged += grow
			nb := make([]byte, len(f.buf), int64(cap(f.buf))+grow)
			copy(nb, f.buf)
			f.buf = nb
		} else {
			f.startTrimLocked(whyBufferFull)
		}
	}
	if !f.trim {
		f.buf = append(f.buf, p...)
		return
	}
	for len(p) > 0 {
		if n := len(f.blocks); n == 0 || len(f.blocks[n-1]) == blockSize {
			f.blocks = append(f.blocks, make([]byte, 0, blockSize))
		}
		last := &f.blocks[len(f.blocks)-1]
		k := min(len(p), blockSize-len(*last))
		*last = append(*last, p[:k]...)
		p = p[k:]
	}
	f.rechargeLocked()
}

// startTrimLocked switches to trimming: the bytes not yet read by every
// reader move, once, into blocks, and the contiguous buffer is let go.
func (f *fill) startTrimLocked(why reason) {
	f.trim, f.why = true, why
	low := f.lowLocked()
	unread := f.buf[low:]
	f.base, f.buf = low, nil
	for len(unread) > 0 {
		k := min(len(unread), blockSize)
		f.blocks = append(f.blocks, append(make([]byte, 0, blockSize), unread[:k]...))
		unread = unread[k:]
	}
	f.rechargeLocked()
}

// lowLocked is the lowest offset a reader still needs (the end if none).
func (f *fill) lowLocked() int64 {
	low := f.endLocked()
	for r := range f.readers {
		low = min(low, r.off)
	}
	return low
}

// endLocked is the stream offset after the last byte received.
func (f *fill) endLocked() int64 {
	if !f.trim {
		return int64(len(f.buf))
	}
	return f.base + f.heldLocked()
}

// heldLocked is the bytes a trimming fill holds.
func (f *fill) heldLocked() int64 {
	var n int64
	for _, b := range f.blocks {
		n += int64(len(b))
	}
	return n
}

// compactLocked drops the full blocks every reader has read, and those
// beyond the window that are in the spill file (readers behind read them
// there).
func (f *fill) compactLocked() {
	low := f.lowLocked()
	held := f.heldLocked()
	for len(f.blocks) > 0 && len(f.blocks[0]) == blockSize {
		end := f.base + blockSize
		read := end <= low
		spilled := f.sp != nil && end <= f.spillEnd && held >= f.windowBytes()
		if !read && !spilled {
			break
		}
		f.blocks = f.blocks[1:]
		f.base = end
		held -= blockSize
	}
	f.rechargeLocked()
}

// windowBytes is the unread bytes a trimming fill keeps in memory.
func (f *fill) windowBytes() int64 {
	if f.window > 0 {
		return f.window
	}
	return trimWindow
}

// spillLocked starts the spill file with every block held, so that from
// now on the blocks beyond the window can go. It reports whether the fill
// now spills. Called by the pump (the spill's only writer) with f.mu held:
// it writes at most a window and a chunk, once.
func (f *fill) spillLocked() bool {
	if f.sp != nil {
		return !f.sp.full
	}
	if f.spool == nil || f.noSpill {
		return false
	}
	sp, err := f.spool.open(f.base)
	if err != nil {
		f.noSpill = true
		return false
	}
	for _, b := range f.blocks {
		if sp.append(b) != nil {
			sp.close()
			f.noSpill = true
			return false
		}
	}
	f.sp, f.spillEnd = sp, f.base+sp.size
	return true
}

// rechargeLocked makes a trimming fill's charge match the blocks it holds
// (a window: bounded per fill, and accounted so that new fills see it).
func (f *fill) rechargeLocked() {
	if c := int64(len(f.blocks)) * blockSize; c != f.charged {
		f.budget.release(f.charged)
		f.budget.force(c)
		f.charged = c
	}
}

// makeRoom keeps a trimming fill within its window. When the window is
// full because of readers far behind while others wait at the end, the
// laggards are detached (they fail; the others go on); when every reader
// is behind, the pump waits for them. It ends the fill when no reader is
// left.
func (f *fill) makeRoom() error {
	for {
		f.mu.Lock()
		if !f.trim {
			f.mu.Unlock()
			return nil
		}
		f.compactLocked()
		if len(f.readers) == 0 {
			f.mu.Unlock()
			return errFillAbandoned
		}
		if f.heldLocked() < f.windowBytes() {
			f.mu.Unlock()
			return nil
		}
		if f.spillLocked() {
			f.compactLocked()
			if f.heldLocked() < f.windowBytes()+blockSize {
				// The window, and the block being filled: the rest
				// is in the file.
				f.mu.Unlock()
				return nil
			}
		}
		end := f.endLocked()
		waiting := false
		for r := range f.readers {
			if r.off == end {
				waiting = true
			}
		}
		if waiting {
			for r := range f.readers {
				if end-r.off >= f.windowBytes() {
					r.lost = true
					delete(f.readers, r)
				}
			}
			f.compactLocked()
			f.notifyLocked()
			f.mu.Unlock()
			continue
		}
		ch := f.changed
		f.mu.Unlock()
		<-ch
	}
}

// afterBody has fn run as the body ends, after what bodyEnd already
// does, and reports true; or reports false, running nothing, when the
// body has ended already.
func (f *fill) afterBody(fn func()) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.done {
		return false
	}
	if prev := f.bodyEnd; prev != nil {
		f.bodyEnd = func() { prev(); fn() }
	} else {
		f.bodyEnd = fn
	}
	return true
}

// finish marks the fill done, with the whole entry when it may be stored.
func (f *fill) finish(err error) error {
	f.mu.Lock()
	after := f.finishLocked(err)
	f.mu.Unlock()
	if after != nil {
		after()
	}
	return err
}

// finishLocked marks the fill done (ended by err) and returns what the
// commit left to run once mu is released.
func (f *fill) finishLocked(err error) (after func()) {
	if f.bodyEnd != nil {
		f.bodyEnd()
		f.bodyEnd = nil
	}
	f.done, f.bodyErr = true, err
	f.releaseLocked()
	defer f.notifyLocked()
	if err == nil && !f.trim {
		f.whole = f.entry.withBody(f.buf)
		if f.commit != nil {
			after = f.commit(f.whole)
		}
	}
	return after
}

// completeWith makes f a finished fill holding e (a response that needed
// no body transfer, such as a 304 update), before it is published.
func (f *fill) completeWith(e *Entry) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.buf, f.done, f.whole = e.Body, true, e
	f.notifyLocked()
}

// releaseLocked gives the fill's bytes back to the budget once the body is
// in and no reader still sends from the buffer. Until then they stay
// charged even if the store holds them too: a slow reader keeps them in
// memory after the store has let go.
func (f *fill) releaseLocked() {
	if f.done && len(f.readers) == 0 && f.charged > 0 {
		f.budget.release(f.charged)
		f.charged = 0
	}
	if f.done && len(f.readers) == 0 && f.sp != nil {
		f.sp.close() // no reader can be reading it: each reads as a registered reader
		f.sp = nil
	}
}

// inSpillLocked reports whether the byte at off is in the spill file.
func (f *fill) inSpillLocked(off int64) bool {
	return f.sp != nil && off >= f.sp.base && off < f.spillEnd
}

// final returns the entry with its whole body, or nil if the fill has not
// ended with one.
func (f *fill) final() *Entry {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.whole
}

// trimReason says why a fill could not keep its whole body.
func (f *fill) trimReason() reason {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.why
}

// waitDoneOrTrim blocks until the fill is done or is trimming (it will
// never hold its whole body), or ctx ends; false means ctx ended.
func (f *fill) waitDoneOrTrim(ctx context.Context) bool {
	return f.waitFor(ctx, func() bool { return f.done || f.trim })
}

// waitDone blocks until the body is in (or failed) or ctx ends, and
// reports whether the fill is done.
func (f *fill) waitDone(ctx context.Context) bool {
	return f.waitFor(ctx, func() bool { return f.done })
}

// waitFor blocks until cond (checked under f.mu) holds or ctx ends.
func (f *fill) waitFor(ctx context.Context, cond func() bool) bool {
	for {
		f.mu.Lock()
		ok, ch := cond(), f.changed
		f.mu.Unlock()
		if ok {
			return true
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return false
		}
	}
}

// reader returns a reader of the body from its first byte. It fails if a
// trimming fill already dropped that byte. Close it when done.
func (f *fill) reader() (*fillReader, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.base > 0 || (f.done && f.bodyErr != nil) {
		return nil, false // the caller fetches for itself
	}
	r := &fillReader{f: f}
	f.readers[r] = struct{}{}
	return r, true
}

// fillReader reads a fill's body as it arrives.
type fillReader struct {
	f    *fill
	off  int64
	lost bool   // detached from a trimming fill for falling a window behind
	buf  []byte // what it last read from the spill file (allocated when first behind)
}

// errReaderTooSlow fails a reader detached from a trimming fill.
var errReaderTooSlow = errors.New("proxy: reader fell too far behind a response that cannot be stored")

// next returns the bytes available after the reader's offset, waiting for
// more while the fill runs (calling beforeWait first, if not nil); io.EOF
// at the end. The returned slice is never
// written again (the buffer only grows, and compaction copies).
func (r *fillReader) next(ctx context.Context, beforeWait func()) ([]byte, error) {
	f := r.f
	for {
		f.mu.Lock()
		if r.lost {
			f.mu.Unlock()
			return nil, errReaderTooSlow
		}
		if r.off < f.base && f.inSpillLocked(r.off) {
			// Behind the window: the bytes are in the spill file,
			// which nothing rewrites and which stays open while this
			// reader is registered, so it is read without the lock.
			sp, n := f.sp, min(f.base, f.spillEnd)-r.off
			f.mu.Unlock()
			return r.readSpill(sp, n)
		}
		if b := f.sliceLocked(r.off); len(b) > 0 {
			r.off += int64(len(b))
			if f.trim {
				f.notifyLocked() // the pump may be waiting for the slowest reader
			}
			f.mu.Unlock()
			return b, nil
		}
		if f.done {
			err := f.bodyErr
			f.mu.Unlock()
			if err == nil {
				return nil, io.EOF
			}
			return nil, err
		}
		ch := f.changed
		f.mu.Unlock()
		if beforeWait != nil {
			beforeWait() // e.g. flush what the client has so far
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// readSpill reads up to n bytes at the reader's offset from sp into the
// reader's own buffer, which the caller uses before the next call.
func (r *fillReader) readSpill(sp *spill, n int64) ([]byte, error) {
	if r.buf == nil {
		r.buf = make([]byte, blockSize)
	}
	k, err := sp.readAt(r.buf[:min(n, int64(len(r.buf)))], r.off)
	if k == 0 && err == nil {
		err = io.ErrUnexpectedEOF // the file holds what spillEnd says: never short
	}
	if err != nil {
		return nil, fmt.Errorf("reading a spilled body: %w", err)
	}
	f := r.f
	f.mu.Lock()
	r.off += int64(k)
	f.mu.Unlock()
	return r.buf[:k], nil
}

// sliceLocked returns the bytes from off onwards that lie in one piece of
// memory (at most 32 KiB), or nil when there are none yet.
func (f *fill) sliceLocked(off int64) []byte {
	if !f.trim {
		if off >= int64(len(f.buf)) {
			return nil
		}
		return f.buf[off:min(int64(len(f.buf)), off+blockSize)]
	}
	pos := f.base
	for _, b := range f.blocks {
		if off < pos+int64(len(b)) {
			return b[off-pos:]
		}
		pos += int64(len(b))
	}
	return nil
}

// Close removes the reader, letting a trimming fill drop what it held.
func (r *fillReader) Close() {
	r.f.mu.Lock()
	delete(r.f.readers, r)
	r.f.releaseLocked()
	r.f.notifyLocked()
	r.f.mu.Unlock()
}
