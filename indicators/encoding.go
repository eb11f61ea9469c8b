package indicators

import (
	"encoding/binary"
	"hash/crc32"
	"math"
	"math/bits"

	"github.com/bits-and-blooms/bitset"

	"github.com/edgecache/edge/internal/reject"
)

// Wire format of an advertisement (all integers big-endian):
//
//	0  "EDGI"      magic
//	4  version     1 byte (1)
//	5  kind        1 byte: 1 full, 2 delta
//	6  k           1 byte: hash functions
//	7  reserved    1 byte (0)
//	8  epoch       8 bytes
//	16 base epoch  8 bytes: the epoch a delta applies to (0 for full)
//	24 m           8 bytes: filter size in bits
//	32 fpr, fnr    2 × 8 bytes: IEEE 754 estimates at advertisement
//	48 length      4 bytes: payload length
//	52 payload     full: ⌈m/64⌉ 8-byte words; delta: uvarint count, then
//	               uvarint gaps between the sorted positions of flipped bits
//	…  crc32c      4 bytes over everything before it
const (
	wireVersion = 1
	kindFull    = 1
	kindDelta   = 2
	headerLen   = 52
	// MaxBits bounds an advertised filter (2^31 bits = 256 MiB); anything
	// larger is rejected as oversized before any allocation.
	MaxBits = 1 << 31
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Reason is why a payload was rejected; each has a counter.
type Reason = reject.Reason

// Rejection reasons.
const (
	ReasonShort     Reason = "short"
	ReasonMagic     Reason = "magic"
	ReasonVersion   Reason = "version"
	ReasonKind      Reason = "kind"
	ReasonOversized Reason = "oversized"
	ReasonChecksum  Reason = "checksum"
	ReasonLength    Reason = "length"
	ReasonParams    Reason = "params"
	ReasonBase      Reason = "base"  // a delta for an epoch the replica does not hold
	ReasonStale     Reason = "stale" // an epoch not newer than the replica's
)

// AllReasons lists every rejection reason, for metrics.
var AllReasons = []Reason{ReasonShort, ReasonMagic, ReasonVersion, ReasonKind, ReasonOversized, ReasonChecksum, ReasonLength, ReasonParams, ReasonBase, ReasonStale}

func rejectPayload(r Reason, format string, args ...any) error {
	return reject.New("indicator payload", r, format, args...)
}

// RejectReason extracts the reason of a decode or apply error.
func RejectReason(err error) (Reason, bool) { return reject.ReasonOf(err) }

// Payload is a decoded advertisement.
type Payload struct {
	Delta    bool
	Epoch    uint64
	Base     uint64
	M        uint
	K        uint
	FPR, FNR float64
	Words    []uint64 // full: the bit set's words
	// FlipCount is, for a delta, how many positions changed since Base;
	// EachFlip reads them.
	FlipCount int
	flips     []byte // the delta's gaps, checked by Decode
}

func putHeader(buf []byte, kind byte, k uint, epoch, base uint64, m uint, fpr, fnr float64, n int) {
	copy(buf, "EDGI")
	buf[4], buf[5], buf[6], buf[7] = wireVersion, kind, byte(k), 0
	binary.BigEndian.PutUint64(buf[8:], epoch)
	binary.BigEndian.PutUint64(buf[16:], base)
	binary.BigEndian.PutUint64(buf[24:], uint64(m))
	binary.BigEndian.PutUint64(buf[32:], math.Float64bits(fpr))
	binary.BigEndian.PutUint64(buf[40:], math.Float64bits(fnr))
	binary.BigEndian.PutUint32(buf[48:], uint32(n))
}

func seal(buf []byte) []byte {
	return binary.BigEndian.AppendUint32(buf, crc32.Checksum(buf, castagnoli))
}

// EncodeFull encodes the whole snapshot.
func EncodeFull(s Snapshot) []byte {
	words := s.Bits.Words()
	need := int((s.M + 63) / 64)
	buf := make([]byte, headerLen, headerLen+8*need+4)
	putHeader(buf, kindFull, s.K, s.Epoch, 0, s.M, s.FPR, s.FNR, 8*need)
	for i := range need {
		var w uint64
		if i < len(words) {
			w = words[i]
		}
		buf = binary.BigEndian.AppendUint64(buf, w)
	}
	return seal(buf)
}

// flips returns the positions that differ between a and b.
func flips(a, b *bitset.BitSet) []uint64 {
	x := a.SymmetricDifference(b)
	out := make([]uint64, 0, x.Count())
	for i, ok := x.NextSet(0); ok; i, ok = x.NextSet(i + 1) {
		out = append(out, uint64(i))
	}
	return out
}

// EncodeDelta encodes the bits flipped since the previous epoch, or returns
// nil when there is no previous epoch.
func EncodeDelta(s Snapshot) []byte {
	if s.Prev == nil || s.Epoch < 2 {
		return nil
	}
	fl := flips(s.Bits, s.Prev)
	buf := make([]byte, headerLen, headerLen+binary.MaxVarintLen64*(len(fl)+1)+4)
	body := binary.AppendUvarint(nil, uint64(len(fl)))
	prev := uint64(0)
	for i, p := range fl {
		gap := p - prev
		if i == 0 {
			gap = p
		}
		body = binary.AppendUvarint(body, gap)
		prev = p
	}
	putHeader(buf, kindDelta, s.K, s.Epoch, s.Epoch-1, s.M, s.FPR, s.FNR, len(body))
	return seal(append(buf, body...))
}

// Encode picks the delta encoding when fewer than m / log2 m bits flipped
// (each flip costs about log2 m bits to name), else the full one. It
// reports which it chose.
func Encode(s Snapshot) (payload []byte, delta bool) {
	if s.Prev != nil && s.Epoch >= 2 {
		x := s.Bits.SymmetricDifferenceCardinality(s.Prev)
		if float64(x) < float64(s.M)/math.Log2(float64(max(s.M, 2))) {
			return EncodeDelta(s), true
		}
	}
	return EncodeFull(s), false
}

// Decode parses and checks a payload. It never allocates more than the
// payload's own length justifies. A delta's Payload reads its positions
// from b (EachFlip): b must not change until they are read.
func Decode(b []byte) (Payload, error) {
	var p Payload
	if len(b) < headerLen+4 {
		return p, rejectPayload(ReasonShort, "%d bytes, need at least %d", len(b), headerLen+4)
	}
	if string(b[:4]) != "EDGI" {
		return p, rejectPayload(ReasonMagic, "bad magic %q", b[:4])
	}
	if b[4] != wireVersion {
		return p, rejectPayload(ReasonVersion, "version %d, want %d", b[4], wireVersion)
	}
	kind := b[5]
	if kind != kindFull && kind != kindDelta {
		return p, rejectPayload(ReasonKind, "kind %d", kind)
	}
	if b[7] != 0 {
		// Reserved: one spelling per payload (the encoder writes 0).
		return p, rejectPayload(ReasonParams, "reserved byte %d, want 0", b[7])
	}
	p.K = uint(b[6])
	p.Epoch = binary.BigEndian.Uint64(b[8:])
	p.Base = binary.BigEndian.Uint64(b[16:])
	m := binary.BigEndian.Uint64(b[24:])
	if m == 0 || m > MaxBits {
		return p, rejectPayload(ReasonOversized, "m = %d bits, limit %d", m, uint64(MaxBits))
	}
	p.M = uint(m)
	p.FPR = math.Float64frombits(binary.BigEndian.Uint64(b[32:]))
	p.FNR = math.Float64frombits(binary.BigEndian.Uint64(b[40:]))
	n := int(binary.BigEndian.Uint32(b[48:]))
	if headerLen+n+4 != len(b) {
		return p, rejectPayload(ReasonLength, "payload length %d does not match %d bytes received", n, len(b)-headerLen-4)
	}
	if got, want := binary.BigEndian.Uint32(b[headerLen+n:]), crc32.Checksum(b[:headerLen+n], castagnoli); got != want {
		return p, rejectPayload(ReasonChecksum, "crc32c %08x, computed %08x", got, want)
	}
	if p.K == 0 || p.K > 64 || p.Epoch == 0 || !validRatio(p.FPR) || !validRatio(p.FNR) {
		return p, rejectPayload(ReasonParams, "k %d, epoch %d, fpr %v, fnr %v", p.K, p.Epoch, p.FPR, p.FNR)
	}
	body := b[headerLen : headerLen+n]
	if kind == kindFull {
		if n != 8*int((m+63)/64) {
			return p, rejectPayload(ReasonLength, "full payload of %d bytes for m = %d", n, m)
		}
		p.Words = make([]uint64, n/8)
		for i := range p.Words {
			p.Words[i] = binary.BigEndian.Uint64(body[8*i:])
		}
		if rem := m % 64; rem != 0 && p.Words[len(p.Words)-1]>>rem != 0 {
			return p, rejectPayload(ReasonParams, "bits set beyond m")
		}
		return p, nil
	}
	p.Delta = true
	if p.Base+1 != p.Epoch {
		return p, rejectPayload(ReasonParams, "delta from epoch %d to %d", p.Base, p.Epoch)
	}
	count, k := uvarint(body)
	if k <= 0 || count > m || count > uint64(n) {
		return p, rejectPayload(ReasonLength, "bad flip count")
	}
	// The positions are checked here and read again by EachFlip, not
	// kept: a slice of them would take 8 bytes per byte of payload (a
	// flip can cost one), so a large delta from a member would make the
	// decoder allocate 8 times what it was sent (a hostile review).
	p.FlipCount = int(count)
	p.flips = body[k:]
	if err := p.walkFlips(nil); err != nil {
		return p, err
	}
	return p, nil
}

// EachFlip calls f with each position whose bit changed since Base, in
// increasing order (a delta decoded without error).
func (p Payload) EachFlip(f func(pos uint64)) { _ = p.walkFlips(f) }

// walkFlips reads p's flip positions, checking each, and calls f (if
// set) with it.
func (p Payload) walkFlips(f func(pos uint64)) error {
	body, m := p.flips, uint64(p.M)
	pos := uint64(0)
	for i := range p.FlipCount {
		gap, k := uvarint(body)
		if k <= 0 {
			return rejectPayload(ReasonLength, "truncated or overlong flip %d of %d", i, p.FlipCount)
		}
		body = body[k:]
		if i > 0 && gap == 0 {
			return rejectPayload(ReasonParams, "repeated flip position")
		}
		if gap > m || pos+gap >= m {
			return rejectPayload(ReasonParams, "flip position beyond m")
		}
		pos += gap
		if f != nil {
			f(pos)
		}
	}
	if len(body) != 0 {
		return rejectPayload(ReasonLength, "%d trailing bytes", len(body))
	}
	return nil
}

// uvarint is binary.Uvarint that also refuses an encoding longer than
// the shortest (a trailing 0x00 group), so that a payload has one
// spelling: the encoder's (binary.AppendUvarint).
func uvarint(b []byte) (uint64, int) {
	v, k := binary.Uvarint(b)
	if k > 1 && b[k-1] == 0 {
		return 0, -k
	}
	return v, k
}

func validRatio(x float64) bool { return x >= 0 && x <= 1 }

// popcount of words, for tests.
func popcount(words []uint64) int {
	n := 0
	for _, w := range words {
		n += bits.OnesCount64(w)
	}
	return n
}
