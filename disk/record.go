package disk

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"net/http"
	"time"
)

// Record is one stored response (one variant of one URL) as the tier keeps
// it: what the proxy needs to rebuild its entry, nothing derived.
type Record struct {
	Key          string      // URL cache key
	VaryKey      string      // selecting request header values ("" without Vary)
	VaryNames    []string    // header names from Vary, as the proxy normalised them
	Status       int         // response status code
	Header       http.Header // stored header fields
	Body         []byte      // the complete body
	RequestTime  time.Time   // when the request that produced the response was sent
	ResponseTime time.Time   // when its response was received
	Surrogates   []string    // surrogate keys, so that purge by tag finds the record
	Stale        bool        // soft-purged: revalidate before use
	// KeyScheme is the cache-key scheme the record was written under
	// (Options.KeyScheme; "" for records older than schemes). Set by the
	// tier, never by the caller: a record of another scheme is never
	// returned.
	KeyScheme string
}

// File layout (all integers big-endian):
//
//	0  magic "EDG1"
//	4  flags (bit 0: stale), then 3 zero bytes
//	8  meta length      u32
//	12 CRC-32C of meta  u32
//	16 body length      u64
//	24 CRC-32C of body  u32
//	28 zero             u32
//	32 meta, then body
//
// The flags live outside both checksums so that a soft purge is one byte
// written in place. A file whose lengths do not add up to its size, or
// whose checksums fail, is a partial or corrupt write and is discarded.
const (
	headerSize = 32
	magic      = "EDG1"
	flagStale  = 1
	// maxMeta bounds the metadata a file may claim, so a corrupt length
	// cannot make a reader allocate gigabytes.
	maxMeta = 1 << 20
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// ErrCorrupt reports a file that is not a whole record.
var ErrCorrupt = errors.New("disk: corrupt record")

// encode returns the file bytes of r, written under the cache-key scheme
// scheme.
func encode(r *Record, scheme string) []byte {
	meta := encodeMeta(r, scheme)
	buf := make([]byte, headerSize, headerSize+len(meta)+len(r.Body))
	copy(buf, magic)
	if r.Stale {
		buf[4] = flagStale
	}
	binary.BigEndian.PutUint32(buf[8:], uint32(len(meta)))
	binary.BigEndian.PutUint32(buf[12:], crc32.Checksum(meta, castagnoli))
	binary.BigEndian.PutUint64(buf[16:], uint64(len(r.Body)))
	binary.BigEndian.PutUint32(buf[24:], crc32.Checksum(r.Body, castagnoli))
	buf = append(buf, meta...)
	return append(buf, r.Body...)
}

// fileHeader is the decoded fixed header.
type fileHeader struct {
	stale   bool
	metaLen int
	metaCRC uint32
	bodyLen int64
	bodyCRC uint32
}

func (h fileHeader) size() int64 { return headerSize + int64(h.metaLen) + h.bodyLen }

func parseHeader(b []byte) (fileHeader, error) {
	if len(b) < headerSize || string(b[:4]) != magic {
		return fileHeader{}, fmt.Errorf("%w: bad magic", ErrCorrupt)
	}
	// No checksum covers the flags and the zero bytes: a flag this
	// version does not know or a zero byte that is not is damage, which
	// was served (a review's TestS29DiskFlippedReservedHeaderByteIsServed).
	if b[4]&^flagStale != 0 || b[5]|b[6]|b[7] != 0 || binary.BigEndian.Uint32(b[28:]) != 0 {
		return fileHeader{}, fmt.Errorf("%w: reserved header bytes are not zero", ErrCorrupt)
	}
	h := fileHeader{
		stale:   b[4]&flagStale != 0,
		metaLen: int(binary.BigEndian.Uint32(b[8:])),
		metaCRC: binary.BigEndian.Uint32(b[12:]),
		bodyLen: int64(binary.BigEndian.Uint64(b[16:])),
		bodyCRC: binary.BigEndian.Uint32(b[24:]),
	}
	if h.metaLen > maxMeta || h.bodyLen < 0 || h.bodyLen > 1<<40 {
		return fileHeader{}, fmt.Errorf("%w: impossible lengths", ErrCorrupt)
	}
	return h, nil
}

// decode parses a whole file, verifying both checksums.
func decode(b []byte) (*Record, error) {
	h, err := parseHeader(b)
	if err != nil {
		return nil, err
	}
	if int64(len(b)) != h.size() {
		return nil, fmt.Errorf("%w: %d bytes, header says %d", ErrCorrupt, len(b), h.size())
	}
	meta := b[headerSize : headerSize+h.metaLen]
	body := b[headerSize+h.metaLen:]
	if crc32.Checksum(meta, castagnoli) != h.metaCRC || crc32.Checksum(body, castagnoli) != h.bodyCRC {
		return nil, fmt.Errorf("%w: checksum mismatch", ErrCorrupt)
	}
	r, err := decodeMeta(meta)
	if err != nil {
		return nil, err
	}
	r.Body, r.Stale = body, h.stale
	return r, nil
}

// encodeMeta writes everything but the body: length-prefixed strings and
// varints, so that decoding needs no reflection and rejects garbage early.
// The key scheme comes last and only when there is one, so that a tier
// without one writes what tiers wrote before schemes existed, and a
// version before them reads a record with one as corrupt (and drops it)
// rather than trusting its keys.
func encodeMeta(r *Record, scheme string) []byte {
	var b []byte
	str := func(s string) { b = appendString(b, s) }
	strs := func(ss []string) { b = appendStrings(b, ss) }
	str(r.Key)
	str(r.VaryKey)
	strs(r.VaryNames)
	b = binary.AppendUvarint(b, uint64(r.Status))
	b = binary.AppendVarint(b, r.RequestTime.UnixNano())
	b = binary.AppendVarint(b, r.ResponseTime.UnixNano())
	strs(r.Surrogates)
	b = binary.AppendUvarint(b, uint64(len(r.Header)))
	for k, vs := range r.Header {
		str(k)
		strs(vs)
	}
	if scheme != "" {
		str(scheme)
	}
	return b
}

// metaReader decodes encodeMeta's output, remembering the first error.
type metaReader struct {
	b   []byte
	err error
}

func (m *metaReader) uvarint() uint64 {
	if m.err != nil {
		return 0
	}
	v, n := binary.Uvarint(m.b)
	if n <= 0 {
		m.err = fmt.Errorf("%w: bad varint", ErrCorrupt)
		return 0
	}
	m.b = m.b[n:]
	return v
}

func (m *metaReader) varint() int64 {
	if m.err != nil {
		return 0
	}
	v, n := binary.Varint(m.b)
	if n <= 0 {
		m.err = fmt.Errorf("%w: bad varint", ErrCorrupt)
		return 0
	}
	m.b = m.b[n:]
	return v
}

func (m *metaReader) str() string {
	n := m.uvarint()
	if m.err != nil {
		return ""
	}
	if n > uint64(len(m.b)) {
		m.err = fmt.Errorf("%w: string past the end", ErrCorrupt)
		return ""
	}
	s := string(m.b[:n])
	m.b = m.b[n:]
	return s
}

func (m *metaReader) strs() []string {
	n := m.uvarint()
	if m.err != nil {
		return nil
	}
	// Each string takes at least one byte, which bounds a hostile count.
	if n > uint64(len(m.b)) {
		m.err = fmt.Errorf("%w: list past the end", ErrCorrupt)
		return nil
	}
	if n == 0 {
		return nil
	}
	out := make([]string, 0, n)
	for range n {
		out = append(out, m.str())
	}
	return out
}

func decodeMeta(b []byte) (*Record, error) {
	m := &metaReader{b: b}
	r := &Record{Key: m.str(), VaryKey: m.str(), VaryNames: m.strs()}
	status := m.uvarint()
	r.RequestTime = time.Unix(0, m.varint())
	r.ResponseTime = time.Unix(0, m.varint())
	r.Surrogates = m.strs()
	fields := m.uvarint()
	if m.err == nil && fields > uint64(len(m.b)) {
		m.err = fmt.Errorf("%w: header count past the end", ErrCorrupt)
	}
	if m.err == nil {
		r.Header = make(http.Header, fields)
		for range fields {
			k := m.str()
			r.Header[k] = m.strs()
		}
	}
	if m.err == nil && len(m.b) != 0 {
		r.KeyScheme = m.str()
		if m.err == nil && r.KeyScheme == "" {
			m.err = fmt.Errorf("%w: an empty key scheme", ErrCorrupt) // encodeMeta never writes one
		}
	}
	if m.err != nil {
		return nil, m.err
	}
	if len(m.b) != 0 {
		return nil, fmt.Errorf("%w: %d bytes after the metadata", ErrCorrupt, len(m.b))
	}
	if status < 100 || status > 999 {
		return nil, fmt.Errorf("%w: status %d", ErrCorrupt, status)
	}
	r.Status = int(status)
	return r, nil
}

// appendString appends s with its length (the metaReader's str).
func appendString(b []byte, s string) []byte {
	return append(binary.AppendUvarint(b, uint64(len(s))), s...)
}

// appendStrings appends ss with their count (the metaReader's strs).
func appendStrings(b []byte, ss []string) []byte {
	b = binary.AppendUvarint(b, uint64(len(ss)))
	for _, s := range ss {
		b = appendString(b, s)
	}
	return b
}
