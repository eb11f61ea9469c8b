package proxy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// The spool: where a response that cannot be stored goes when its slowest
// reader falls behind the upstream. Without it, a fill that may not keep
// its whole body waits for its slowest reader once its window is full, and
// so holds its upstream connection and one of the limits.max_inflight
// slots for as long as that reader takes: enough slow readers of large or
// uncacheable answers turned every miss into a 503. With it, the pump
// keeps reading at the upstream's pace into an unlinked temporary file,
// gives its slot back when the body is in, and each reader behind the
// in-memory window reads the file at its own pace (nginx's proxy_temp_path
// does the same; no maintained library does it for an io.Reader shared by
// several readers, so it is written here).
//
// A spill file is unlinked as soon as it is created, so nothing of a
// response (which may be private: a pass's answer) outlives the process,
// even after a crash; it is 0600 while it has a name.

// spooler hands out spill files within a byte budget.
type spooler struct {
	dir     string
	budget  int64 // bytes on disk at once, all spills together
	perFile int64 // bytes one spill may hold
	used    atomic.Int64
	files   atomic.Int64
	m       spoolMetrics
}

// spillFileShare is the share of the budget one response may take, so
// that one huge download cannot leave nothing for the other slow readers.
const spillFileShare = 4

// newSpooler returns a spooler in dir (os.TempDir() if empty) with a
// budget of bytes, or nil when bytes is 0 (spooling off).
func newSpooler(dir string, bytes int64, m spoolMetrics) *spooler {
	if bytes <= 0 {
		return nil
	}
	if dir == "" {
		dir = os.TempDir()
	}
	// A share holds at least a trimming fill's first spill (its window and
	// the block being filled) and a chunk more, or it would fill at once
	// (a review's TestReviewSmallSpoolNeverSpillsATrimmingFill).
	perFile := min(bytes, max(bytes/spillFileShare, trimWindow+2*blockSize))
	return &spooler{dir: dir, budget: bytes, perFile: perFile, m: m}
}

// CheckSpoolDir reports whether dir can hold spill files, creating and
// removing one, so that a bad limits.spool_dir stops startup rather than
// the first slow reader.
func CheckSpoolDir(dir string) error {
	if dir == "" {
		dir = os.TempDir()
	}
	f, err := os.CreateTemp(dir, "edge-spill-check-*")
	if err != nil {
		return fmt.Errorf("cannot create a file in %s: %w", dir, err)
	}
	name := f.Name()
	_, werr := f.Write([]byte{0})
	cerr := f.Close()
	rerr := os.Remove(name)
	return errors.Join(werr, cerr, rerr)
}

// spill is one response's spill file: the stream's bytes from base, as
// the pump appended them. Only the pump writes (append only); readers read
// what was written before they looked (size, read under the fill's lock).
type spill struct {
	s       *spooler
	f       *os.File
	base    int64 // stream offset of the file's first byte
	size    int64 // bytes written
	charged int64
	full    bool // the budget ran out: nothing more is appended
}

var errSpoolFull = errors.New("proxy: spool budget exhausted")

// open creates a spill for the stream from offset base.
func (s *spooler) open(base int64) (*spill, error) {
	f, err := os.CreateTemp(s.dir, "edge-spill-*")
	if err != nil {
		s.m.errors.Inc()
		return nil, fmt.Errorf("spool: %w", err)
	}
	if err := os.Remove(f.Name()); err != nil {
		_ = f.Close()
		s.m.errors.Inc()
		return nil, fmt.Errorf("spool: unlinking the spill file: %w", err)
	}
	s.files.Add(1)
	s.m.opened.Inc()
	return &spill{s: s, f: f, base: base}, nil
}

// append writes p at the end of the spill. It fails, and marks the spill
// full for good, when the budget cannot take p; a write error does the same.
func (sp *spill) append(p []byte) error {
	if sp.full {
		return errSpoolFull
	}
	n := int64(len(p))
	if sp.charged+n > sp.s.perFile {
		return sp.fill()
	}
	if sp.s.used.Add(n) > sp.s.budget {
		sp.s.used.Add(-n)
		return sp.fill()
	}
	sp.charged += n
	if _, err := sp.f.WriteAt(p, sp.size); err != nil {
		sp.full = true
		sp.s.m.errors.Inc()
		return fmt.Errorf("spool: %w", err)
	}
	sp.size += n
	sp.s.m.written.Add(float64(n))
	return nil
}

// fill marks the spill full for good.
func (sp *spill) fill() error {
	sp.full = true
	sp.s.m.full.Inc()
	return errSpoolFull
}

// readAt reads the stream's bytes at offset off (within what was written).
func (sp *spill) readAt(p []byte, off int64) (int, error) {
	n, err := sp.f.ReadAt(p, off-sp.base)
	if errors.Is(err, io.EOF) && n > 0 {
		err = nil
	}
	return n, err
}

// close removes the spill and gives its bytes back.
func (sp *spill) close() {
	_ = sp.f.Close() // read-only use ends here; an unlinked file has nothing to flush
	sp.s.used.Add(-sp.charged)
	sp.charged = 0
	sp.s.files.Add(-1)
}

// spoolMetrics are the spool's counters; the gauges read the spooler.
type spoolMetrics struct {
	opened  prometheus.Counter
	written prometheus.Counter
	full    prometheus.Counter
	errors  prometheus.Counter
	used    func() float64
	files   func() float64
}

func newSpoolMetrics(reg prometheus.Registerer) spoolMetrics {
	m := spoolMetrics{
		opened: prometheus.NewCounter(prometheus.CounterOpts{Name: "edge_spool_files_opened_total",
			Help: "Spill files opened: for responses that could not be stored and whose slowest reader fell behind the upstream (the rest of the body went to a spill file in limits.spool_dir, so the upstream connection and its slot were freed at the upstream's pace), and for request bodies over 64 KiB read before their request took a slot (edge_request_bodies_total{how=\"disk\"})."}),
		written: prometheus.NewCounter(prometheus.CounterOpts{Name: "edge_spool_written_bytes_total",
			Help: "Bytes written to spill files."}),
		full: prometheus.NewCounter(prometheus.CounterOpts{Name: "edge_spool_full_total",
			Help: "Spill files that reached their share of limits.spool_bytes: the response then waited for its slowest reader again, holding its upstream slot (a request body: the rest was sent as it came)."}),
		errors: prometheus.NewCounter(prometheus.CounterOpts{Name: "edge_spool_errors_total",
			Help: "Spill files that could not be created or written (the response then waited for its slowest reader)."}),
	}
	reg.MustRegister(m.opened, m.written, m.full, m.errors)
	return m
}

// registerSpoolGauges exports what the spooler holds now.
func registerSpoolGauges(reg prometheus.Registerer, m *Metrics) {
	reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "edge_spool_bytes", Help: "Bytes in spill files now (limits.spool_bytes bounds it)."},
			func() float64 {
				if m.spool.used == nil {
					return 0
				}
				return m.spool.used()
			}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "edge_spool_files", Help: "Spill files open now."},
			func() float64 {
				if m.spool.files == nil {
					return 0
				}
				return m.spool.files()
			}),
	)
}

// spoolWindow is the unread bytes a spooled stream keeps in memory: a
// stream has one reader, so a small window is enough to keep a client that
// reads as fast as the upstream sends off the disk.
const spoolWindow = 64 << 10

// spooled returns body read through a trimming fill that spills, so that a
// client slower than the upstream does not hold the upstream: release (the
// upstream slot; it must be safe to call twice) is called once the body is
// in. Call the returned func when done reading; the caller still closes
// body, which also ends the pump of a reader that left early. With
// spilling off it returns body itself.
func (h *Handler) spooled(ctx context.Context, body io.Reader, release func()) (io.Reader, func()) {
	if h.spool == nil {
		return body, func() {}
	}
	f := newFill(0, fillWait{})
	f.trim, f.why = true, whyTooLarge
	f.spool, f.window, f.bodyEnd = h.spool, spoolWindow, release
	rd, _ := f.reader() // base is 0: always
	h.bg.Go(func() {
		// Its window is not charged to the buffer budget, as the copy
		// buffer it stands in for was not: a long-lived stream that
		// never spills (server-sent events) held its block's charge for
		// its whole life, and enough of them kept every response from
		// being stored (a review's TestReviewIdleEventStreamsEatTheBufferBudget).
		if err := f.pump(body, -1, 0, unchargedBudget{}); err != nil && !errors.Is(err, errFillAbandoned) {
			h.log.Debug("spooling a streamed body", "err", err)
		}
	})
	b := &spooledBody{rd: rd, ctx: ctx}
	return b, b.close
}

// unchargedBudget is the budget of a spooled stream: its window is
// bounded per stream (spoolWindow and a block) and not counted.
type unchargedBudget struct{}

func (unchargedBudget) charge(int64) bool { return true }
func (unchargedBudget) force(int64)       {}
func (unchargedBudget) release(int64)     {}

// readWhole reads a body of known length n (at most spoolWindow) into
// memory, so that the upstream is done with before the client is written
// to: a client that reads nothing of a small uncacheable page otherwise
// held its slot until the write timeout (a review's
// TestReviewStalledClientOfASmallUncacheablePageHoldsTheSlot). A body
// that breaks is returned with its error, to end the answer as before.
func readWhole(body io.Reader, n int64) (io.Reader, error) {
	b := make([]byte, n)
	k, err := io.ReadFull(body, b)
	if err != nil {
		return io.MultiReader(bytes.NewReader(b[:k]), errReader{err}), err
	}
	return bytes.NewReader(b), nil
}

// errReader fails every read with err.
type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }

// spooledBody reads a spooled stream: whatever is there at once, so that
// the copier sees the upstream's pauses (and flushes) as before.
type spooledBody struct {
	rd     *fillReader
	ctx    context.Context // the client's: its reads end when it leaves
	cur    []byte
	closed bool
}

func (b *spooledBody) Read(p []byte) (int, error) {
	if len(b.cur) == 0 {
		next, err := b.rd.next(b.ctx, nil)
		if err != nil {
			return 0, err
		}
		b.cur = next
	}
	n := copy(p, b.cur)
	b.cur = b.cur[n:]
	return n, nil
}

// close leaves the stream (once): a pump with no reader left ends at its
// next chunk, or when the caller closes the upstream body.
func (b *spooledBody) close() {
	if !b.closed {
		b.closed = true
		b.rd.Close()
	}
}
