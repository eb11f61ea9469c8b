package coding

import (
	"bytes"
	"errors"
	"fmt"
	"io"

	"github.com/klauspost/compress/zstd"
)

// This file charges what coding allocates to a caller's memory budget
// before it is allocated: the output of whole-body work (Encode, Decode)
// and the state of an open coder. The constants are upper bounds measured
// with runtime.MemStats (TestCoderStateWithinItsCharge holds them), and
// docs/operations.md "What the edge guarantees" lists them.

// Budget is asked for memory before it is allocated.
type Budget interface {
	// Charge takes n bytes, or reports false (taking nothing) when they
	// do not fit.
	Charge(n int64) bool
	// Release gives n bytes back.
	Release(n int64)
}

// ErrBudget is returned when the budget refused the memory a step needs;
// nothing of that step stays allocated or charged.
var ErrBudget = errors.New("coding: over the memory budget")

// Streaming coders' windows. A response encoded as it streams is paid per
// client, so its coder keeps a small window: on this repository's pages a
// 256 KiB window compresses as well as the libraries' 4–8 MiB defaults
// (brotli 4: ratio 0.020 at lgwin 18, 20 and 22), for a tenth of the
// memory (BenchmarkStreamCoderMemory).
const (
	streamBrLgWin = 18
	streamZstdWin = 256 << 10
)

// Memory one open brotli encoder holds, by quality, in MiB: measured with
// runtime.MemStats after 512 KiB of text (TestCoderStateWithinItsCharge)
// and rounded up with headroom. Stream coders keep a 256 KiB window
// (lgwin 18), stored-form coders brotli's default 4 MiB (lgwin 22).
var (
	brStreamMiB = [12]int64{2, 3, 2, 2, 4, 4, 6, 13, 23, 45, 9, 9}
	brStoredMiB = [12]int64{2, 4, 11, 11, 12, 13, 14, 22, 32, 54, 55, 55}
)

// zstdStreamBytes is one open zstd stream encoder (256 KiB window, lower
// memory) by the library's four speeds: 0.8, 1.9, 4.7 and 35 MiB measured.
func zstdStreamBytes(level int) int64 {
	switch zstd.EncoderLevelFromZstd(level) {
	case zstd.SpeedFastest:
		return 1 << 20
	case zstd.SpeedDefault:
		return 5 << 19
	case zstd.SpeedBetterCompression:
		return 6 << 20
	}
	return 42 << 20
}

// EncoderBytes is the most memory one open encoder of e from this codec
// holds besides its output: a streaming one (NewWriter) or, for a stored
// form, one whole-body encode. zstd's whole-body encodes share one encoder
// (EncodeAll, concurrency 1) whose memory is allocated once per codec, not
// per call, so they charge nothing here.
func (c *Codec) EncoderBytes(e Encoding) int64 {
	switch e {
	case Br:
		q := min(max(c.levels.Br, 0), 11)
		if c.stream {
			return brStreamMiB[q] << 20
		}
		return brStoredMiB[q] << 20
	case Zstd:
		return zstdStreamBytes(c.levels.Zstd)
	case Gzip:
		return 3 << 19 // 0.8 MiB at level 1, 1.05 at 6, 1.4 at 9
	}
	return 0
}

// DecoderBytes is the most memory one open decoder of e holds: its window
// (brotli's largest is 16 MiB; zstd's is capped at 8 MiB, RFC 9659) and
// its tables.
func DecoderBytes(e Encoding) int64 {
	switch e {
	case Br:
		return 16<<20 + 256<<10
	case Zstd:
		return 8<<20 + 512<<10
	case Gzip, Deflate:
		return 64 << 10
	}
	return 0
}

// encodeBound is the most an encoding of n bytes can take (incompressible
// input is stored raw in blocks: a few bytes per 16 KiB block, plus frame
// headers and trailers).
func encodeBound(n int) int { return n + n/64 + 1024 }

// EncodeCharged is Encode with its coder state and output charged to b
// first. It returns the encoded body, of which len(out) bytes stay
// charged: the caller releases them when it lets go of out.
func (c *Codec) EncodeCharged(e Encoding, body []byte, b Budget) ([]byte, error) {
	state, bound := int64(0), int64(encodeBound(len(body)))
	if e != Zstd {
		state = c.EncoderBytes(e)
	}
	if !b.Charge(state + bound) {
		return nil, ErrBudget
	}
	out, err := c.encodeInto(e, body, make([]byte, 0, bound))
	b.Release(state)
	if err != nil {
		b.Release(bound)
		return nil, err
	}
	if int64(len(out)) > bound {
		// Cannot happen within encodeBound; if it did, the charge is
		// made right rather than wrong.
		b.Release(bound)
		if !b.Charge(int64(len(out))) {
			return nil, ErrBudget
		}
		return out, nil
	}
	if int64(cap(out)-len(out)) > bound/16 {
		// Give the unused capacity back: a compressed body kept in a
		// buffer sized for the input would hold memory nobody charged.
		exact := make([]byte, len(out)) // within the charge: len(out) ≤ bound
		copy(exact, out)
		out = exact
	}
	b.Release(bound - int64(len(out)))
	return out, nil
}

// encodeInto encodes body with e, appending to dst.
func (c *Codec) encodeInto(e Encoding, body, dst []byte) ([]byte, error) {
	if e == Zstd {
		return c.zall.EncodeAll(body, dst), nil
	}
	buf := bytes.NewBuffer(dst)
	w, err := c.NewWriter(e, buf)
	if err != nil {
		return nil, err
	}
	if _, err := w.Write(body); err != nil {
		_ = w.Close()
		return nil, fmt.Errorf("coding: %s: %w", e, err)
	}
	if err := w.Close(); err != nil {
		return nil, fmt.Errorf("coding: %s: %w", e, err)
	}
	return buf.Bytes(), nil
}

// DecodeCharged is Decode with the decoder's state and every byte of its
// output charged to b before it is allocated: the output grows in chunks,
// each charged first, and is joined into one buffer (charged first) at the
// end. Of the returned body len(out) bytes stay charged. Over the budget it
// returns ErrBudget, with nothing left charged.
func (c *Codec) DecodeCharged(e Encoding, body []byte, limit int64, b Budget) ([]byte, error) {
	state := DecoderBytes(e)
	if !b.Charge(state) {
		return nil, ErrBudget
	}
	defer b.Release(state)
	r, err := c.NewReader(e, bytes.NewReader(body), limit)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	cb := &chargedBuffer{b: b}
	if _, err := io.Copy(cb, r); err != nil {
		cb.free()
		if errors.Is(err, ErrTooLarge) || errors.Is(err, ErrBudget) {
			return nil, err
		}
		return nil, fmt.Errorf("coding: decoding %s: %w", e, err)
	}
	return cb.join()
}

// chargedBuffer collects output in chunks, charging each before it is
// allocated.
type chargedBuffer struct {
	b       Budget
	chunks  [][]byte
	n       int
	charged int64
}

const (
	firstChunk = 32 << 10
	maxChunk   = 1 << 20
)

func (w *chargedBuffer) Write(p []byte) (int, error) {
	written := 0
	for len(p) > 0 {
		var cur []byte
		if k := len(w.chunks); k > 0 {
			cur = w.chunks[k-1]
		}
		if cur == nil || len(cur) == cap(cur) {
			size := firstChunk
			if cur != nil {
				size = min(2*cap(cur), maxChunk)
			}
			if !w.b.Charge(int64(size)) {
				return written, ErrBudget
			}
			w.charged += int64(size)
			w.chunks = append(w.chunks, make([]byte, 0, size))
			continue
		}
		k := copy(cur[len(cur):cap(cur)], p)
		w.chunks[len(w.chunks)-1] = cur[:len(cur)+k]
		p, written, w.n = p[k:], written+k, w.n+k
	}
	return written, nil
}

// join returns the output as one buffer, of which exactly its length
// stays charged.
func (w *chargedBuffer) join() ([]byte, error) {
	if len(w.chunks) == 1 && cap(w.chunks[0]) == w.n {
		out := w.chunks[0]
		w.chunks = nil
		return out, nil // its charge is its length
	}
	if !w.b.Charge(int64(w.n)) {
		w.free()
		return nil, ErrBudget
	}
	out := make([]byte, 0, w.n)
	for _, c := range w.chunks {
		out = append(out, c...)
	}
	w.free()
	return out, nil
}

// free drops the chunks and their charge.
func (w *chargedBuffer) free() {
	w.chunks = nil
	w.b.Release(w.charged)
	w.charged = 0
}
