package proxy

import (
	"bytes"
	"context"
	"runtime"
	"testing"
	"time"
)

// Regression test for a bug found in the second review: one reader
// draining a fill that switched to trimming made the pump copy the whole
// remaining buffer every 32 KiB (now blocks are dropped, never copied).
func TestTrimTransitionQuadraticCopy(t *testing.T) {
	p := newTestProxy(t, nil)
	h := p.h
	f := newFill(0, fillWait{})
	f.entry = &Entry{Status: 200}
	rd, _ := f.reader()
	body := bytes.NewReader(make([]byte, 16<<20))
	go f.pump(body, -1, 8<<20, h)
	// wait for the transition
	for !f.waitDoneOrTrim(context.Background()) {
	}
	time.Sleep(50 * time.Millisecond)
	runtime.GC()
	var m0 runtime.MemStats
	runtime.ReadMemStats(&m0)
	start := time.Now()
	n := 0
	for {
		b, err := rd.next(context.Background(), nil)
		n += len(b)
		if err != nil {
			break
		}
		time.Sleep(500 * time.Microsecond) // a client's write
	}
	var m1 runtime.MemStats
	runtime.ReadMemStats(&m1)
	allocated := m1.TotalAlloc - m0.TotalAlloc
	t.Logf("read %d MiB in %v; allocated %.0f MiB while draining; Buffered now %d", n>>20, time.Since(start), float64(allocated)/(1<<20), h.Buffered())
	if n != 16<<20 {
		t.Errorf("read %d bytes, want all %d", n, 16<<20)
	}
	// Each advance copying the remainder (the quadratic copy this guards
	// against) allocated hundreds of MiB; blocks dropped as read cost
	// about the body once.
	if allocated > 32<<20 {
		t.Errorf("draining a 16 MiB trimming fill allocated %d MiB", allocated>>20)
	}
	rd.Close()
}

// Readers ahead of the slowest one each keep a slice (a Write blocked on a
// client that stopped reading) of a different buffer generation.
func TestTrimGenerationsPinned(t *testing.T) {
	p := newTestProxy(t, nil)
	h := p.h
	f := newFill(0, fillWait{})
	f.entry = &Entry{Status: 200}
	slow, _ := f.reader()
	const n = 40
	var ahead []*fillReader
	for i := 0; i < n; i++ {
		r, _ := f.reader()
		ahead = append(ahead, r)
	}
	go f.pump(bytes.NewReader(make([]byte, 16<<20)), -1, 8<<20, h)
	for !f.waitDoneOrTrim(context.Background()) {
	}
	time.Sleep(100 * time.Millisecond) // pump now waits (window full, nobody at the end)
	f.mu.Lock()
	end := f.base + int64(len(f.buf))
	f.mu.Unlock()
	// the "ahead" readers move to a bit before the end (never at it: no detaching)
	for _, r := range ahead {
		for r.off < end-(64<<10) {
			r.next(context.Background(), nil)
		}
	}
	runtime.GC()
	var m0 runtime.MemStats
	runtime.ReadMemStats(&m0)
	var pinned [][]byte
	for _, r := range ahead {
		slow.next(context.Background(), nil) // the slowest advances: the pump copies the rest into a new array
		time.Sleep(5 * time.Millisecond)
		b, _ := r.next(context.Background(), nil) // this reader's Write then blocks, holding b
		pinned = append(pinned, b)
	}
	runtime.GC()
	var m1 runtime.MemStats
	runtime.ReadMemStats(&m1)
	grown := int64(m1.HeapInuse) - int64(m0.HeapInuse)
	t.Logf("%d readers each holding one 32 KiB slice: heap +%.0f MiB; Buffered %.1f MiB (budget %d MiB)", n, float64(grown)/(1<<20), float64(h.Buffered())/(1<<20), h.cfg.MaxBufferedBytes>>20)
	// Pinned slices of one array of blocks, not one ~8 MiB generation per
	// reader (40 × 8 MiB before the fix).
	if grown > 16<<20 {
		t.Errorf("%d readers pinning a slice each grew the heap by %d MiB", n, grown>>20)
	}
	if h.Buffered() > h.cfg.MaxBufferedBytes {
		t.Errorf("Buffered %d exceeds the budget", h.Buffered())
	}
	runtime.KeepAlive(pinned)
	slow.Close()
	for _, r := range ahead {
		r.Close()
	}
}

// A fill abandoned before its first compaction (base 0) still hands out
// readers: a waiter that registers after the last reader left gets the
// prefix and then errFillAbandoned (serveFrom: aborted connection) instead
// of its own fetch.
func TestReaderOnAbandonedFill(t *testing.T) {
	p := newTestProxy(t, nil)
	f := newFill(0, fillWait{})
	f.entry = &Entry{Status: 200}
	rd, _ := f.reader()
	rd.Close() // e.g. a HEAD leader
	f.pump(bytes.NewReader(make([]byte, 200<<10)), -1, 100<<10, p.h)
	r, ok := f.reader()
	if !ok {
		return
	}
	var n int
	var err error
	for err == nil {
		var b []byte
		b, err = r.next(context.Background(), nil)
		n += len(b)
	}
	t.Errorf("late reader of an abandoned fill accepted: read %d bytes, then %v", n, err)
}
