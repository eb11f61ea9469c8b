package coding

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strconv"
	"sync"

	"github.com/andybalholm/brotli"
	kflate "github.com/klauspost/compress/flate"
	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zlib"
	"github.com/klauspost/compress/zstd"
)

// ErrTooLarge is returned when a decoded body would exceed its limit: a
// decompression bomb, or simply more than the caller can hold.
var ErrTooLarge = errors.New("coding: decoded body exceeds the limit")

// Levels are the compression levels of each produced coding.
type Levels struct {
	Br   int // 0–11
	Zstd int // 1–22 (zstd's own scale; mapped to the library's four speeds)
	Gzip int // 1–9
}

// DefaultLevels are for stored forms, compressed once and served many
// times (docs/benchmarks.md has the cost per MiB of each level, measured on
// this repository's text): brotli 5 costs about 89 ms/MiB, five times gzip
// 6, for output 10 % smaller than gzip's; zstd 3 is its library default
// (14 ms/MiB) and gzip 6 zlib's.
var DefaultLevels = Levels{Br: 5, Zstd: 3, Gzip: 6}

// DefaultStreamLevels are for responses encoded as they stream (the
// leader of a miss, uncacheable responses, a hit whose stored form is not
// made yet): paid per request, so each coding's fastest level
// (docs/benchmarks.md, "Compression": gzip 1 costs half of gzip 6's CPU
// for 17 % more bytes; zstd 1 and brotli 1 likewise). A miss must not be
// CPU-bound on compression (issue 36: flate at level 6 took 75 % of a
// node's CPU under a miss-heavy replay); stored forms, made once, use
// DefaultLevels.
var DefaultStreamLevels = Levels{Br: 1, Zstd: 1, Gzip: 1}

// Validate reports a level out of range.
func (l Levels) Validate() error {
	switch {
	case l.Br < brotli.BestSpeed || l.Br > brotli.BestCompression:
		return fmt.Errorf("brotli level %d is not in 0–11", l.Br)
	case l.Zstd < 1 || l.Zstd > 22:
		return fmt.Errorf("zstd level %d is not in 1–22", l.Zstd)
	case l.Gzip < 1 || l.Gzip > 9:
		return fmt.Errorf("gzip level %d is not in 1–9", l.Gzip)
	}
	return nil
}

// FormTag names what this codec makes of a body in e, for the entity-tag
// of a form the edge makes ("v1" becomes "v1-br5"): the coding and its
// level, so that two nodes at other levels (a rolling change of
// compression.brotli_level) never give one strong tag to two byte
// sequences, which a strong If-Range would splice into a body that does
// not decode (RFC 9110 §8.8.1: a strong validator changes with the bytes).
// Decoding is exact, so identity is "identity". The same input at the same
// level makes the same bytes with these coders; TestFormBytesArePinned
// holds that to account, and formGeneration is what to change (appended
// to every coded tag) when a coder's output changes.
func (c *Codec) FormTag(e Encoding) string {
	level := 0
	switch e {
	case Br:
		level = c.levels.Br
	case Zstd:
		level = c.levels.Zstd
	case Gzip:
		level = c.levels.Gzip
	default:
		return e.String()
	}
	return e.String() + strconv.Itoa(level) + formGeneration
}

// formGeneration marks a change in what the coders make of a body at one
// level (a library upgrade that changes its output): "" for the first, then
// "g2", "g3", … (TestFormBytesArePinned fails until it is changed).
const formGeneration = ""

// maxZstdWindow bounds the memory a zstd frame can make a decoder
// allocate: RFC 9659 §3 limits a zstd content coding's window to 8 MB
// (level 19 output uses 8 MiB windows).
const maxZstdWindow = 8 << 20

// Codec encodes and decodes with pooled coder state. It is safe for
// concurrent use.
type Codec struct {
	levels Levels
	stream bool      // small windows: a coder per client (NewStreamCodec)
	br     sync.Pool // *brotli.Writer
	gz     sync.Pool // *gzip.Writer
	zw     sync.Pool // *zstd.Encoder (streams)
	zall   *zstd.Encoder
	zr     sync.Pool // *zstd.Decoder
	brr    sync.Pool // *brotli.Reader
	gzr    sync.Pool // *gzip.Reader
}

// NewCodec returns a codec producing the given levels.
func NewCodec(l Levels) (*Codec, error) {
	if err := l.Validate(); err != nil {
		return nil, err
	}
	zall, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.EncoderLevelFromZstd(l.Zstd)), zstd.WithEncoderConcurrency(1))
	if err != nil {
		return nil, fmt.Errorf("coding: zstd: %w", err)
	}
	return &Codec{levels: l, zall: zall}, nil
}

// NewStreamCodec returns a codec for responses encoded as they stream, one
// coder per client: its brotli and zstd encoders keep a 256 KiB window
// (EncoderBytes bounds each), where the libraries' defaults hold
// 4–8 MiB.
func NewStreamCodec(l Levels) (*Codec, error) {
	c, err := NewCodec(l)
	if err != nil {
		return nil, err
	}
	c.stream = true
	return c, nil
}

// Writer is a streaming encoder. Flush emits everything written so far as
// a decodable prefix; Close ends the stream and returns the coder to its
// pool (the Writer must not be used after).
type Writer interface {
	io.Writer
	Flush() error
	Close() error
}

// NewWriter returns an encoder of e writing to w. e must be Br, Zstd or Gzip.
func (c *Codec) NewWriter(e Encoding, w io.Writer) (Writer, error) {
	switch e {
	case Br:
		if bw, ok := c.br.Get().(*brotli.Writer); ok {
			bw.Reset(w)
			return &pooled{Writer: bw, put: func() { c.br.Put(bw) }}, nil
		}
		opts := brotli.WriterOptions{Quality: c.levels.Br}
		if c.stream {
			opts.LGWin = streamBrLgWin
		}
		bw := brotli.NewWriterOptions(w, opts)
		return &pooled{Writer: bw, put: func() { c.br.Put(bw) }}, nil
	case Gzip:
		if gw, ok := c.gz.Get().(*gzip.Writer); ok {
			gw.Reset(w)
			return &pooled{Writer: gw, put: func() { c.gz.Put(gw) }}, nil
		}
		gw, err := gzip.NewWriterLevel(w, c.levels.Gzip)
		if err != nil {
			return nil, fmt.Errorf("coding: gzip: %w", err)
		}
		return &pooled{Writer: gw, put: func() { c.gz.Put(gw) }}, nil
	case Zstd:
		if zw, ok := c.zw.Get().(*zstd.Encoder); ok {
			zw.Reset(w)
			return &pooled{Writer: zw, put: func() { c.zw.Put(zw) }}, nil
		}
		opts := []zstd.EOption{zstd.WithEncoderLevel(zstd.EncoderLevelFromZstd(c.levels.Zstd)), zstd.WithEncoderConcurrency(1)}
		if c.stream {
			opts = append(opts, zstd.WithWindowSize(streamZstdWin), zstd.WithLowerEncoderMem(true))
		}
		zw, err := zstd.NewWriter(w, opts...)
		if err != nil {
			return nil, fmt.Errorf("coding: zstd: %w", err)
		}
		return &pooled{Writer: zw, put: func() { c.zw.Put(zw) }}, nil
	}
	return nil, fmt.Errorf("coding: cannot encode %s", e)
}

// pooled gives its coder back to the pool on Close.
type pooled struct {
	Writer
	put  func()
	done bool
}

func (p *pooled) Close() error {
	if p.done {
		return nil
	}
	p.done = true
	err := p.Writer.Close()
	p.put()
	return err
}

// Encode returns body encoded with e.
func (c *Codec) Encode(e Encoding, body []byte) ([]byte, error) {
	return c.encodeInto(e, body, make([]byte, 0, len(body)/3+64))
}

// NewReader returns a decoder of e reading from r that fails with
// ErrTooLarge once more than limit decoded bytes would be produced.
// Close returns the decoder to its pool; it does not close r.
func (c *Codec) NewReader(e Encoding, r io.Reader, limit int64) (io.ReadCloser, error) {
	var dec io.Reader
	put := func() {}
	switch e {
	case Identity:
		dec = r
	case Br:
		br, ok := c.brr.Get().(*brotli.Reader)
		if ok {
			if err := br.Reset(r); err != nil {
				return nil, fmt.Errorf("coding: br: %w", err)
			}
		} else {
			br = brotli.NewReader(r)
		}
		dec, put = br, func() { c.brr.Put(br) }
	case Gzip:
		gr, ok := c.gzr.Get().(*gzip.Reader)
		var err error
		if ok {
			err = gr.Reset(r)
		} else {
			gr, err = gzip.NewReader(r)
		}
		if err != nil {
			return nil, fmt.Errorf("coding: gzip: %w", err)
		}
		gr.Multistream(true)
		dec, put = gr, func() { c.gzr.Put(gr) }
	case Zstd:
		zr, ok := c.zr.Get().(*zstd.Decoder)
		var err error
		if ok {
			err = zr.Reset(r)
		} else {
			zr, err = zstd.NewReader(r, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxWindow(maxZstdWindow),
				zstd.WithDecoderLowmem(true))
		}
		if err != nil {
			return nil, fmt.Errorf("coding: zstd: %w", err)
		}
		dec, put = zr, func() { _ = zr.Reset(nil); c.zr.Put(zr) }
	case Deflate:
		d, err := newDeflateReader(r)
		if err != nil {
			return nil, err
		}
		dec, put = d, func() { _ = d.Close() }
	default:
		return nil, fmt.Errorf("coding: cannot decode %s", e)
	}
	return &limited{r: dec, left: limit, put: put}, nil
}

// newDeflateReader reads HTTP's "deflate", which RFC 9110 §8.4.1.2 defines
// as the zlib format; some servers send raw deflate instead, so a stream
// without a zlib header is read as raw deflate.
func newDeflateReader(r io.Reader) (io.ReadCloser, error) {
	var head [2]byte
	n, err := io.ReadFull(r, head[:])
	if err != nil && n == 0 {
		return nil, fmt.Errorf("coding: deflate: %w", err)
	}
	full := io.MultiReader(bytes.NewReader(head[:n]), r)
	if n == 2 && head[0]&0x0f == 8 && (uint16(head[0])<<8|uint16(head[1]))%31 == 0 {
		zr, err := zlib.NewReader(full)
		if err != nil {
			return nil, fmt.Errorf("coding: deflate: %w", err)
		}
		return zr, nil
	}
	return kflate.NewReader(full), nil
}

// limited fails with ErrTooLarge past its limit.
type limited struct {
	r    io.Reader
	left int64
	put  func()
	done bool
}

func (l *limited) Read(p []byte) (int, error) {
	if l.left <= 0 {
		// One more byte means the limit is exceeded; none means the body
		// ended exactly at it.
		var one [1]byte
		n, err := l.r.Read(one[:])
		if n > 0 {
			return 0, ErrTooLarge
		}
		return 0, err
	}
	if int64(len(p)) > l.left {
		p = p[:l.left]
	}
	n, err := l.r.Read(p)
	l.left -= int64(n)
	return n, err
}

func (l *limited) Close() error {
	if !l.done {
		l.done = true
		l.put()
	}
	return nil
}

// Decode returns body decoded from e, or ErrTooLarge if it would exceed
// limit bytes.
func (c *Codec) Decode(e Encoding, body []byte, limit int64) ([]byte, error) {
	r, err := c.NewReader(e, bytes.NewReader(body), limit)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	out := bytes.NewBuffer(make([]byte, 0, min(int64(len(body))*4, limit)+1))
	if _, err := io.Copy(out, r); err != nil {
		if errors.Is(err, ErrTooLarge) {
			return nil, ErrTooLarge
		}
		return nil, fmt.Errorf("coding: decoding %s: %w", e, err)
	}
	return out.Bytes(), nil
}
