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
// memory (TestCoderStateWithinItsCharge holds the charge).
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

// zstdBytes is one open zstd encoder by the library's four speeds, with
// the stream codec's 256 KiB window and lower memory (0.8, 1.9, 4.7 and
// 35 MiB measured) and with the library's default 8 MiB window (stored:
// 8.6, 17.7 and 20.5 MiB measured; the best speed not measured, charged
// generously). A switch, not a table: the library says its levels' values
// may change.
func zstdBytes(level int) (stream, stored int64) {
	switch zstd.EncoderLevelFromZstd(level) {
	case zstd.SpeedFastest:
		return 1 << 20, 10 << 20
	case zstd.SpeedDefault:
		return 5 << 19, 20 << 20
	case zstd.SpeedBetterCompression:
		return 6 << 20, 24 << 20
	}
	return 42 << 20, 72 << 20
}

// EncoderBytes is the most memory one open streaming encoder of e from
// this codec (NewWriter) holds besides its output, for up to
// streamInputBytes of input; a stored-form codec's encoders (NewCodec)
// keep larger windows and are charged more.
func (c *Codec) EncoderBytes(e Encoding) int64 {
	switch e {
	case Br:
		q := min(max(c.levels.Br, 0), 11)
		if c.stream {
			return brStreamMiB[q] << 20
		}
		return brStoredMiB[q]<<20 + 2*streamInputBytes
	case Zstd:
		stream, stored := zstdBytes(c.levels.Zstd)
		if c.stream {
			return stream
		}
		return stored
	case Gzip:
		return 3 << 19 // 0.8 MiB at level 1, 1.05 at 6, 1.4 at 9
	}
	return 0
}

// streamInputBytes is the input a stored-form brotli encoder is charged
// for when it streams (NewWriter of a NewCodec codec): it buffers about
// twice its input up to a metablock, so a longer stream is undercharged.
// The node streams with NewStreamCodec's coders, which stay within their
// constant at any length.
const streamInputBytes = 4 << 20

// wholeBodyEncoderBytes is what one whole-body encode of n bytes holds
// besides its output (EncodeCharged). zstd's whole-body encodes share one
// encoder per codec (EncodeAll, concurrency 1), allocated once, not per
// call. brotli's stored-form encoder holds its window and tables and about
// twice the input it has buffered (measured at level 5: 10.9 MiB after
// 512 KiB, 14.8 after 2 MiB, 26.2 after 8 MiB).
func (c *Codec) wholeBodyEncoderBytes(e Encoding, n int) int64 {
	switch e {
	case Br:
		q := min(max(c.levels.Br, 0), 11)
		return brStoredMiB[q]<<20 + 2*int64(n) + 1<<20
	case Zstd:
		return 0
	}
	return c.EncoderBytes(e)
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
	state, bound := c.wholeBodyEncoderBytes(e, len(body)), int64(encodeBound(len(body)))
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

// DecodeCharged is Decode with the decoder's window and every byte of its
// output charged to b before they are allocated. It decodes twice: once to
// learn the decoded size (nothing kept but the decoder's window), then into
// one buffer of exactly that size, charged first; the peak is the window
// plus the body, where growing a buffer would hold up to twice the body
// uncharged. The second pass costs CPU on a path only clients that refuse
// the origin's coding take. Of the returned body len(out) bytes stay
// charged. Over the budget it returns ErrBudget, with nothing left charged.
func (c *Codec) DecodeCharged(e Encoding, body []byte, limit int64, b Budget) ([]byte, error) {
	state := DecoderBytesFor(e, body)
	if !b.Charge(state) {
		return nil, ErrBudget
	}
	defer b.Release(state)
	n, err := c.decodedSize(e, body, limit)
	if err != nil {
		return nil, err
	}
	if !b.Charge(n) {
		return nil, ErrBudget
	}
	out, err := c.decodeInto(e, body, make([]byte, n))
	if err != nil {
		b.Release(n)
		return nil, err
	}
	return out, nil
}

// decodedSize decodes body without keeping the output and returns its
// length, or ErrTooLarge past limit.
func (c *Codec) decodedSize(e Encoding, body []byte, limit int64) (int64, error) {
	r, err := c.NewReader(e, bytes.NewReader(body), limit)
	if err != nil {
		return 0, err
	}
	defer r.Close()
	n, err := io.Copy(io.Discard, r)
	if err != nil {
		if errors.Is(err, ErrTooLarge) {
			return 0, ErrTooLarge
		}
		return 0, fmt.Errorf("coding: decoding %s: %w", e, err)
	}
	return n, nil
}

// decodeInto decodes body into out, which must be exactly its decoded
// length (decodedSize).
func (c *Codec) decodeInto(e Encoding, body, out []byte) ([]byte, error) {
	r, err := c.NewReader(e, bytes.NewReader(body), int64(len(out)))
	if err != nil {
		return nil, err
	}
	defer r.Close()
	if _, err := io.ReadFull(r, out); err != nil {
		return nil, fmt.Errorf("coding: decoding %s again: %w", e, err)
	}
	var one [1]byte
	if n, _ := r.Read(one[:]); n > 0 {
		return nil, fmt.Errorf("coding: decoding %s again gave more bytes", e)
	}
	return out, nil
}
