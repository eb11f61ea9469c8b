// Package trace reads cache request traces: big-endian int64 or int32 keys
// (the Caffeine simulator's binary formats), AdaptSize text lines
// "time id size", and plain text with one key per line. Files may be xz- or
// gzip-compressed; the compression is detected from the content.
package trace

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"strings"

	"github.com/ulikunitz/xz"
)

// Format names a trace encoding.
type Format string

// The supported formats.
const (
	Int64BE   Format = "int64be"   // 8-byte big-endian signed keys
	Int32BE   Format = "int32be"   // 4-byte big-endian signed keys
	AdaptSize Format = "adaptsize" // text lines "time id size"
	Lines     Format = "lines"     // text, one key per line
)

// ParseFormat validates a format name.
func ParseFormat(s string) (Format, error) {
	switch f := Format(s); f {
	case Int64BE, Int32BE, AdaptSize, Lines:
		return f, nil
	}
	return "", fmt.Errorf("trace: format %q, want int64be, int32be, adaptsize or lines", s)
}

// Request is one trace entry.
type Request struct {
	Key  string // the key as text (a decimal number for the binary formats)
	ID   uint64 // a 64-bit identity of the key (the number itself where there is one)
	Size int64  // object size in bytes if the trace has it, else 0
}

// Reader yields requests from a trace.
type Reader struct {
	f      Format
	br     *bufio.Reader
	closer io.Closer
	line   int
	buf    [8]byte
}

// Open opens a trace file, decompressing it if needed.
func Open(path string, f Format) (*Reader, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("trace: %w", err)
	}
	r, err := NewReader(fh, f)
	if err != nil {
		_ = fh.Close()
		return nil, err
	}
	r.closer = fh
	return r, nil
}

var (
	xzMagic   = []byte{0xfd, '7', 'z', 'X', 'Z', 0x00}
	gzipMagic = []byte{0x1f, 0x8b}
)

// NewReader reads a trace from r, decompressing xz or gzip content.
func NewReader(r io.Reader, f Format) (*Reader, error) {
	if _, err := ParseFormat(string(f)); err != nil {
		return nil, err
	}
	br := bufio.NewReaderSize(r, maxLine)
	head, _ := br.Peek(6)
	switch {
	case bytes.HasPrefix(head, xzMagic):
		xr, err := xz.NewReader(br)
		if err != nil {
			return nil, fmt.Errorf("trace: xz: %w", err)
		}
		br = bufio.NewReaderSize(codecReader{xr, "xz"}, maxLine)
	case bytes.HasPrefix(head, gzipMagic) && (f == AdaptSize || f == Lines || looksGzipped(br)):
		gr, err := gzip.NewReader(br)
		if err != nil {
			return nil, fmt.Errorf("trace: gzip: %w", err)
		}
		br = bufio.NewReaderSize(codecReader{gr, "gzip"}, maxLine)
	}
	return &Reader{f: f, br: br}, nil
}

// looksGzipped reports whether br's buffered start decompresses as gzip.
// A binary trace has no header of its own, so its first key can begin
// with gzip's two magic bytes (an int32be key 529205248 is 1f 8b 08 00;
// one int64be file in 65,536 starts so): a review found such a trace
// refused as a damaged gzip stream. A text trace cannot start so.
func looksGzipped(br *bufio.Reader) bool {
	head, _ := br.Peek(br.Size()) // as much as is there, up to the buffer
	gr, err := gzip.NewReader(bytes.NewReader(head))
	if err != nil {
		return false
	}
	// All of what is buffered: random keys read as deflate data fail
	// within a few bytes or kilobytes (a reserved block type, a distance
	// before the start), where a real stream decodes to the buffer's end
	// or to its end, its checksum included.
	n, err := io.Copy(io.Discard, gr)
	whole := len(head) < br.Size() // the file ended within the buffer
	// Cut short: at the buffer's end, or a damaged small file that
	// decoded some data first (a raw key sequence that starts like a
	// header ends before any).
	return err == nil || errors.Is(err, io.ErrUnexpectedEOF) && (!whole || n > 0)
}

// maxLine bounds a text trace's line: a key or an AdaptSize entry is
// tens of bytes, and an unbounded line (a small .xz can expand to a
// gigabyte without a newline) would be held whole in memory.
const maxLine = 64 << 10

// Next returns the next request, or io.EOF at the end. A malformed entry is
// an error naming its position; the caller decides whether to stop.
func (r *Reader) Next() (Request, error) {
	switch r.f {
	case Int64BE:
		n, err := io.ReadFull(r.br, r.buf[:8])
		if err != nil {
			return Request{}, r.binaryEOF(n, err, 8)
		}
		r.line++
		v := int64(binary.BigEndian.Uint64(r.buf[:8]))
		return Request{Key: strconv.FormatInt(v, 10), ID: uint64(v)}, nil
	case Int32BE:
		n, err := io.ReadFull(r.br, r.buf[:4])
		if err != nil {
			return Request{}, r.binaryEOF(n, err, 4)
		}
		r.line++
		v := int32(binary.BigEndian.Uint32(r.buf[:4]))
		return Request{Key: strconv.FormatInt(int64(v), 10), ID: uint64(int64(v))}, nil
	}
	for {
		b, err := r.br.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			r.line++
			for errors.Is(err, bufio.ErrBufferFull) { // the rest of the line, so the next one reads
				_, err = r.br.ReadSlice('\n')
			}
			return Request{}, fmt.Errorf("trace: line %d: longer than %d bytes", r.line, maxLine)
		}
		s := string(b)
		if err != nil && (err != io.EOF || s == "") {
			if err == io.EOF {
				return Request{}, io.EOF
			}
			return Request{}, fmt.Errorf("trace: line %d: %w", r.line+1, err) // a codecError says the compression's fault
		}
		r.line++
		if strings.IndexByte(s, 0) >= 0 { // a text key never has one; int64be keys almost always do
			return Request{}, fmt.Errorf("trace: line %d: binary data in a text trace (a binary one wants --format int64be or int32be)", r.line)
		}
		s = strings.TrimSpace(s)
		if s == "" || s[0] == '#' {
			continue
		}
		if r.f == Lines {
			return Request{Key: s, ID: keyID(s)}, nil
		}
		fields := strings.Fields(s)
		if len(fields) != 3 {
			return Request{}, fmt.Errorf("trace: line %d: want \"time id size\", got %d fields", r.line, len(fields))
		}
		if t, err := strconv.ParseFloat(fields[0], 64); err != nil || math.IsNaN(t) || math.IsInf(t, 0) || t < 0 {
			return Request{}, fmt.Errorf("trace: line %d: time %q is not a timestamp", r.line, fields[0])
		}
		id, err := strconv.ParseUint(fields[1], 10, 64)
		if err != nil {
			return Request{}, fmt.Errorf("trace: line %d: id %q is not a number", r.line, fields[1])
		}
		size, err := strconv.ParseInt(fields[2], 10, 64)
		if err != nil || size < 0 {
			return Request{}, fmt.Errorf("trace: line %d: size %q is not a byte count", r.line, fields[2])
		}
		return Request{Key: fields[1], ID: id, Size: size}, nil
	}
}

// codecReader marks a decompressor's errors as the compression's, so that a
// damaged or cut .gz or .xz is reported as such and not as a record cut
// short (a cut gzip stream says io.ErrUnexpectedEOF, which the record
// reader would take for a file ending mid-record).
type codecReader struct {
	r    io.Reader
	name string
}

func (c codecReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	if err != nil && err != io.EOF {
		err = &codecError{c.name, err}
	}
	return n, err
}

// codecError is a decompressor's error.
type codecError struct {
	codec string
	err   error
}

func (e *codecError) Error() string {
	return fmt.Sprintf("the %s stream is damaged or cut short: %v", e.codec, e.err)
}

func (e *codecError) Unwrap() error { return e.err }

func (r *Reader) binaryEOF(n int, err error, width int) error {
	if errors.Is(err, io.EOF) {
		return io.EOF
	}
	var ce *codecError
	if errors.As(err, &ce) {
		return fmt.Errorf("trace: entry %d: %w", r.line+1, ce)
	}
	if errors.Is(err, io.ErrUnexpectedEOF) {
		return fmt.Errorf("trace: entry %d: %d trailing bytes, not a whole %d-byte key", r.line+1, n, width)
	}
	return fmt.Errorf("trace: entry %d: %w", r.line+1, err)
}

// keyID hashes a text key to 64 bits (FNV-1a; stable across runs).
func keyID(s string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= 1099511628211
	}
	return h
}

// Close closes the underlying file, if Open opened it.
func (r *Reader) Close() error {
	if r.closer != nil {
		return r.closer.Close()
	}
	return nil
}

// ReadAll reads up to limit requests (all if limit <= 0).
func ReadAll(path string, f Format, limit int) ([]Request, error) {
	r, err := Open(path, f)
	if err != nil {
		return nil, err
	}
	defer func() { _ = r.Close() }()
	var out []Request
	for limit <= 0 || len(out) < limit {
		req, err := r.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return out, err
		}
		out = append(out, req)
	}
	return out, nil
}
