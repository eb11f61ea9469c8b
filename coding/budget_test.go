package coding

import (
	"bytes"
	"errors"
	"io"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
)

// testBudget is a Budget of a fixed size that records its peak.
type testBudget struct {
	limit, used, peak atomic.Int64
}

func (b *testBudget) Charge(n int64) bool {
	if b.used.Add(n) > b.limit.Load() {
		b.used.Add(-n)
		return false
	}
	for {
		p := b.peak.Load()
		if u := b.used.Load(); u <= p || b.peak.CompareAndSwap(p, u) {
			return true
		}
	}
}

func (b *testBudget) Release(n int64) { b.used.Add(-n) }

func newBudget(n int64) *testBudget { b := &testBudget{}; b.limit.Store(n); return b }

func textBody(n int) []byte {
	var b strings.Builder
	for i := 0; b.Len() < n; i++ {
		b.WriteString("<li>item " + strconv.Itoa(i) + " of a long list of things</li>\n")
	}
	return []byte(b.String()[:n])
}

func TestDecodeChargedChargesWhatItKeeps(t *testing.T) {
	c, _ := NewCodec(DefaultLevels)
	body := textBody(3 << 20)
	for _, e := range []Encoding{Br, Zstd, Gzip} {
		enc, err := c.Encode(e, body)
		if err != nil {
			t.Fatal(err)
		}
		b := newBudget(64 << 20)
		out, err := c.DecodeCharged(e, enc, 32<<20, b)
		if err != nil || !bytes.Equal(out, body) {
			t.Fatalf("%s: %v", e, err)
		}
		if b.used.Load() != int64(len(out)) {
			t.Errorf("%s: %d bytes charged for a %d-byte body", e, b.used.Load(), len(out))
		}
		// With too little budget it stops before allocating the rest, and
		// keeps nothing charged.
		small := newBudget(DecoderBytesFor(e, enc) + 1<<20)
		if _, err := c.DecodeCharged(e, enc, 32<<20, small); !errors.Is(err, ErrBudget) {
			t.Errorf("%s: over the budget: %v, want ErrBudget", e, err)
		}
		if small.used.Load() != 0 || small.peak.Load() > small.limit.Load() {
			t.Errorf("%s: after refusing, %d charged, peak %d", e, small.used.Load(), small.peak.Load())
		}
	}
}

func TestEncodeChargedChargesWhatItKeeps(t *testing.T) {
	c, _ := NewCodec(DefaultLevels)
	body := textBody(1 << 20)
	for _, e := range []Encoding{Br, Zstd, Gzip} {
		b := newBudget(64 << 20)
		out, err := c.EncodeCharged(e, body, b)
		if err != nil {
			t.Fatal(err)
		}
		if b.used.Load() != int64(len(out)) || cap(out) > len(out)+len(out)/16+1 {
			t.Errorf("%s: %d charged, len %d cap %d", e, b.used.Load(), len(out), cap(out))
		}
		if _, err := c.EncodeCharged(e, body, newBudget(1<<20)); !errors.Is(err, ErrBudget) {
			t.Errorf("%s: over the budget: %v", e, err)
		}
	}
}

// heldPerCoder opens n coders of e from c, writes body to each and
// flushes, and returns the heap each holds (then closes them).
func heldPerCoder(c *Codec, e Encoding, body []byte, n int) int64 {
	before := heapInUse()
	ws := make([]Writer, n)
	for i := range ws {
		ws[i], _ = c.NewWriter(e, io.Discard)
		_, _ = ws[i].Write(body)
		_ = ws[i].Flush()
	}
	per := int64(heapInUse()-before) / int64(n)
	runtime.KeepAlive(ws)
	for _, w := range ws {
		_ = w.Close()
	}
	return per
}

func heapInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// TestCoderStateWithinItsCharge holds the constants the edge charges per
// open coder (and docs/operations.md documents) to what the coders really
// hold, at the highest levels the config allows.
func TestCoderStateWithinItsCharge(t *testing.T) {
	if raceDetector {
		t.Skip("measures coders' heap: make test runs it without -race (coding-memory)")
	}
	if testing.Short() {
		t.Skip("measures heap growth of many coders")
	}
	body := textBody(512 << 10)
	const n = 16
	for _, e := range []Encoding{Br, Zstd, Gzip} {
		for _, lv := range []Levels{DefaultLevels, {Br: 9, Zstd: 19, Gzip: 9}, {Br: 1, Zstd: 1, Gzip: 1}, {Br: 4, Zstd: 7, Gzip: 1}} {
			c, _ := NewStreamCodec(lv)
			if e == Br {
				// The stored forms' coders too, at the same level.
				sc, _ := NewCodec(lv)
				if per := heldPerCoder(sc, e, body, n); per > sc.EncoderBytes(e) {
					t.Errorf("stored %s at %+v holds %d KiB per coder; EncoderBytes charges %d KiB", e, lv, per>>10, sc.EncoderBytes(e)>>10)
				}
			}
			if per := heldPerCoder(c, e, body, n); per > c.EncoderBytes(e) {
				t.Errorf("stream %s at %+v holds %d KiB per open coder; EncoderBytes charges %d KiB", e, lv, per>>10, c.EncoderBytes(e)>>10)
			}
		}
		// A large window: brotli's default (lgwin 22), zstd level 19 (8 MiB).
		enc, _ := func() ([]byte, error) {
			c, _ := NewCodec(Levels{Br: 4, Zstd: 19, Gzip: 9})
			return c.Encode(e, textBody(10<<20))
		}()
		before := heapInUse()
		rs := make([]io.ReadCloser, n)
		var sink [4096]byte
		for i := range rs {
			c, _ := NewCodec(DefaultLevels) // pools of its own: no reuse
			rs[i], _ = c.NewReader(e, bytes.NewReader(enc), 64<<20)
			_, _ = io.ReadFull(rs[i], sink[:])
		}
		per := int64(heapInUse()-before) / n
		runtime.KeepAlive(rs)
		if per > DecoderBytes(e) {
			t.Errorf("%s decoder holds %d KiB; DecoderBytes charges %d KiB", e, per>>10, DecoderBytes(e)>>10)
		}
		t.Logf("%s: decoder %d KiB (charged %d)", e, per>>10, DecoderBytes(e)>>10)
	}
}

// TestStoredCodersWithinTheirCharge: a stored-form codec's coders (the
// library's default windows) at the sizes a stored form reaches
// (cache.max_object_bytes, 8 MiB); from the second hostile review, which
// found brotli's state growing with its input and zstd's charged at the
// stream codec's constant.
func TestStoredCodersWithinTheirCharge(t *testing.T) {
	if raceDetector {
		t.Skip("measures coders' heap: make test runs it without -race (coding-memory)")
	}
	if testing.Short() {
		t.Skip("measures heap growth of many coders")
	}
	body := textBody(8 << 20)
	for _, lv := range []Levels{DefaultLevels, {Br: 9, Zstd: 1, Gzip: 6}, {Br: 1, Zstd: 7, Gzip: 6}} {
		c, _ := NewCodec(lv)
		for _, e := range []Encoding{Br, Zstd} {
			per := heldPerCoder(c, e, body, 3)
			charge := c.EncoderBytes(e)
			if e == Br {
				charge = c.wholeBodyEncoderBytes(e, len(body))
			}
			t.Logf("stored %s at %+v after 8 MiB: %d KiB held, %d KiB charged", e, lv, per>>10, charge>>10)
			if per > charge {
				t.Errorf("stored %s at %+v holds %d KiB after 8 MiB; charged %d KiB", e, lv, per>>10, charge>>10)
			}
		}
	}
}

// TestDecoderWindowIsWhatTheStreamDeclares: the decoder is charged the
// window its stream declares, so a small brotli or zstd body decodes under
// a small budget (the review found every brotli decode charged 16 MiB, so
// an 8 MiB budget refused them all, forever).
func TestDecoderWindowIsWhatTheStreamDeclares(t *testing.T) {
	for _, lv := range []Levels{DefaultLevels, {Br: 1, Zstd: 1, Gzip: 1}, {Br: 7, Zstd: 7, Gzip: 9}} {
		c, _ := NewCodec(lv)
		for _, size := range []int{100, 100 << 10, 1 << 20} {
			body := textBody(size)
			for _, e := range []Encoding{Br, Zstd} {
				enc, _ := c.Encode(e, body)
				got := DecoderBytesFor(e, enc)
				if got > DecoderBytes(e) || got < decoderTables {
					t.Errorf("%s level %+v, %d bytes: charged %d", e, lv, size, got)
				}
				// It must decode under that charge plus the body.
				b := newBudget(got + int64(size))
				out, err := c.DecodeCharged(e, enc, 64<<20, b)
				if err != nil || len(out) != size {
					t.Errorf("%s level %+v, %d bytes: %v under a budget of window + body", e, lv, size, err)
				}
			}
		}
	}
	// Bad heads are charged the most.
	for _, head := range [][]byte{nil, {0x21}, {0xff, 0xff}} {
		if DecoderBytesFor(Br, head) != DecoderBytes(Br) && len(head) == 0 {
			t.Errorf("an empty brotli head charged %d", DecoderBytesFor(Br, head))
		}
	}
	if DecoderBytesFor(Zstd, []byte("not zstd at all")) != DecoderBytes(Zstd) {
		t.Error("a body that is not zstd is not charged the most")
	}
}

// FuzzDecoderBytesFor: whatever the head, the charge is within the
// decoder's bounds and the parser does not panic.
func FuzzDecoderBytesFor(f *testing.F) {
	c, _ := NewCodec(DefaultLevels)
	for _, e := range []Encoding{Br, Zstd} {
		enc, _ := c.Encode(e, textBody(5000))
		f.Add(byte(e), enc)
	}
	f.Add(byte(Zstd), []byte{0x28, 0xb5, 0x2f, 0xfd, 0xe4, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, e byte, head []byte) {
		enc := []Encoding{Br, Zstd, Gzip}[int(e)%3]
		got := DecoderBytesFor(enc, head)
		if got <= 0 || got > DecoderBytes(enc) {
			t.Fatalf("%s: %d for %x", enc, got, head)
		}
	})
}
