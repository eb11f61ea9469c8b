package indicators

// Session 41's hostile review of the advertisement format. Each test says
// at its top whether it demonstrates a defect (fails on the current code)
// or pins a property that was checked and holds.

import (
	"encoding/binary"
	"runtime"
	"testing"

	"github.com/bits-and-blooms/bitset"
)

// s41Delta builds a sealed delta payload (epoch 2 from 1) with the given
// m and body.
func s41Delta(m uint64, k uint, body []byte) []byte {
	buf := make([]byte, headerLen, headerLen+len(body)+4)
	putHeader(buf, kindDelta, k, 2, 1, uint(m), 0.01, 0, len(body))
	return seal(append(buf, body...))
}

// DEFECT (failed before 2026-12-07). Decode said "it never allocates more than the
// payload's own length justifies", but a delta allocates 8 bytes of
// Flips per byte of body: each flip costs one byte (a gap of 1) and the
// count is bounded by the body's length, not by 1/8 of it. pullIndicator
// lets a body up to MaxBits/8 + 1 KiB (256 MiB) through, so one answer
// from a member (or a buggy one) makes Decode allocate 2 GiB, before the
// replica looks at the base epoch or m (a delta the replica then refuses
// costs the same, and the refusal lets the next heartbeat pull again).
func TestS41DeltaDecodeAllocatesNoMoreThanItsLength(t *testing.T) {
	const flips = 1 << 20
	body := binary.AppendUvarint(nil, flips)
	for range flips {
		body = append(body, 1) // gap 1: positions 1, 2, 3, …
	}
	b := s41Delta(MaxBits, 7, body)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	p, err := Decode(b)
	runtime.ReadMemStats(&after)
	if err != nil {
		t.Fatal(err)
	}
	var r Replica
	if err := r.Apply(b); err == nil {
		t.Fatal("a delta applied to an empty replica")
	}
	got := after.TotalAlloc - before.TotalAlloc
	t.Logf("%d-byte payload, %d flips: Decode allocated %d bytes (%.1f× the payload)", len(b), p.FlipCount, got, float64(got)/float64(len(b)))
	if got > 2*uint64(len(b)) {
		t.Errorf("Decode allocated %d bytes for a %d-byte payload (%.1f×); at pullIndicator's limit that is %d MiB", got, len(b), float64(got)/float64(len(b)), 8*(MaxBits/8)>>20)
	}
}

// DEFECT (failed before 2026-12-07). The encoder and decoder disagreed
// on what a filter may be. config accepted indicators.capacity up to 2^28
// and indicators.bpe up to 64, so m = bpe·capacity reached 2^34 bits, and
// NewFilter took any size; Decode refuses m > MaxBits = 2^31 as
// oversized, so such a node advertised what no peer could apply (each
// pulled 256 MiB of it per heartbeat and dropped it). NewFilter now
// refuses it (config names indicators.capacity: config's table test),
// and every filter it makes is advertisable.
func TestS41EveryFilterTheConfigAllowsIsAdvertisable(t *testing.T) {
	for _, c := range []struct {
		capacity int
		bpe      float64
	}{{1 << 28, 14}, {1 << 28, 64}, {1<<25 + 1, 64}, {1<<31/14 + 1, 14}} {
		cfg := DefaultFilterConfig(c.capacity)
		cfg.BitsPerElement = c.bpe
		if _, err := NewFilter(cfg); err == nil {
			m, _ := cfg.Params()
			t.Errorf("capacity %d, bpe %v: a filter of %d bits was made; every peer refuses its advertisement", c.capacity, c.bpe, m)
		}
	}
	// The largest filter NewFilter makes is advertisable (a delta of one
	// flip, so as not to allocate it).
	cfg := DefaultFilterConfig(1 << 31 / 14)
	cfg.BitsPerElement = 14
	m, k := cfg.Params()
	if m > MaxBits {
		t.Fatalf("m = %d", m)
	}
	s := Snapshot{Epoch: 2, M: m, K: k, Bits: bitset.New(0).Set(5), Prev: bitset.New(0)}
	if _, err := Decode(EncodeDelta(s)); err != nil {
		t.Errorf("capacity %d, bpe 14: m = %d refused: %v", 1<<31/14, m, err)
	}
}

// DEFECT, minor (failed before 2026-12-07). Decode accepted bytes the encoder never
// writes, so decode → encode is not the identity: the reserved byte (7)
// is never checked, and a flip gap may be a non-minimal uvarint. Neither
// changes what is applied; but the format has two spellings of one
// payload, and FuzzDecode asserts no round trip that would have shown it.
func TestS41DecodeAcceptsOnlyWhatTheEncoderWrites(t *testing.T) {
	fl, _ := NewFilter(FilterConfig{Capacity: 50, BitsPerElement: 8, UpdateInterval: 100, EstimateEvery: 50})
	s1 := fl.Advertise(func(yield func([]byte) bool) { yield([]byte("x")) })
	full := EncodeFull(s1)
	reserved := append([]byte(nil), full[:len(full)-4]...)
	reserved[7] = 0xAA
	if _, err := Decode(seal(reserved)); err == nil {
		t.Error("a full payload with reserved byte 0xAA decoded")
	}
	// One flip at position 3, its gap spelt 0x83 0x00 (3, non-minimal).
	if _, err := Decode(s41Delta(64, 3, []byte{1, 0x83, 0x00})); err == nil {
		t.Error("a delta with a non-minimal uvarint gap decoded")
	}
}

// PROPERTY (holds). Malformed deltas and fulls, each sealed with a valid
// CRC so that the parser proper is reached, are refused with the reason
// named, and the replica is left as it was.
func TestS41MalformedSealedPayloads(t *testing.T) {
	var r Replica
	fl, _ := NewFilter(FilterConfig{Capacity: 50, BitsPerElement: 8, UpdateInterval: 100, EstimateEvery: 50})
	s1 := fl.Advertise(func(yield func([]byte) bool) { yield([]byte("x")) })
	if err := r.Apply(EncodeFull(s1)); err != nil {
		t.Fatal(err)
	}
	m := uint64(s1.M)
	full := func(mod func(b []byte)) []byte {
		b := append([]byte(nil), EncodeFull(s1)...)
		b = b[:len(b)-4]
		mod(b)
		return seal(b)
	}
	cases := []struct {
		name string
		b    []byte
		want Reason
	}{
		{"delta count above body", s41Delta(m, s1.K, binary.AppendUvarint(nil, 5)), ReasonLength},
		{"delta count above m", s41Delta(m, s1.K, append(binary.AppendUvarint(nil, m+1), make([]byte, m+1)...)), ReasonLength},
		{"delta no count", s41Delta(m, s1.K, nil), ReasonLength},
		{"delta truncated varint count", s41Delta(m, s1.K, []byte{0x80}), ReasonLength},
		{"delta count overflowing uint64", s41Delta(m, s1.K, []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f}), ReasonLength},
		{"delta repeated position", s41Delta(m, s1.K, []byte{2, 4, 0}), ReasonParams},
		{"delta position at m", s41Delta(m, s1.K, append([]byte{1}, binary.AppendUvarint(nil, m)...)), ReasonParams},
		{"delta gap wrapping", s41Delta(m, s1.K, append([]byte{2, 1}, binary.AppendUvarint(nil, ^uint64(0))...)), ReasonParams},
		{"delta trailing byte", s41Delta(m, s1.K, []byte{1, 3, 0}), ReasonLength},
		{"delta base not epoch-1", func() []byte {
			b := s41Delta(m, s1.K, []byte{1, 3})
			b = b[:len(b)-4]
			binary.BigEndian.PutUint64(b[16:], 5)
			return seal(b)
		}(), ReasonParams},
		{"k 0", full(func(b []byte) { b[6] = 0 }), ReasonParams},
		{"k 65", full(func(b []byte) { b[6] = 65 }), ReasonParams},
		{"epoch 0", full(func(b []byte) { binary.BigEndian.PutUint64(b[8:], 0) }), ReasonParams},
		{"fpr NaN", full(func(b []byte) { binary.BigEndian.PutUint64(b[32:], 0x7ff8000000000001) }), ReasonParams},
		{"fnr -1", full(func(b []byte) { binary.BigEndian.PutUint64(b[40:], 0xbff0000000000000) }), ReasonParams},
		{"m 0", full(func(b []byte) { binary.BigEndian.PutUint64(b[24:], 0) }), ReasonOversized},
		{"m one word more", full(func(b []byte) { binary.BigEndian.PutUint64(b[24:], m+64) }), ReasonLength},
		{"length 2^32-1", full(func(b []byte) { binary.BigEndian.PutUint32(b[48:], ^uint32(0)) }), ReasonLength},
	}
	for _, tc := range cases {
		err := r.Apply(tc.b)
		if got, _ := RejectReason(err); got != tc.want {
			t.Errorf("%s: %v, want %s", tc.name, err, tc.want)
		}
	}
	if r.Epoch() != 1 || !r.Test([]byte("x")) {
		t.Error("a refused payload changed the replica")
	}
}

// FuzzS41DecodeSealed reaches the parser behind the CRC (FuzzDecode's
// mutations almost never carry a valid one): the fuzzer's bytes become a
// payload's body under a header it chooses, sealed. Accepted payloads
// must keep their flips increasing and below m, apply without a panic,
// and allocate at most what their length justifies.
func FuzzS41DecodeSealed(f *testing.F) {
	f.Add(true, uint64(64), uint8(3), []byte{1, 3})
	f.Add(false, uint64(64), uint8(3), make([]byte, 8))
	f.Add(true, uint64(1000), uint8(7), []byte{3, 0, 1, 1})
	f.Fuzz(func(t *testing.T, delta bool, m uint64, k uint8, body []byte) {
		kind := byte(kindFull)
		if delta {
			kind = kindDelta
		}
		buf := make([]byte, headerLen, headerLen+len(body)+4)
		putHeader(buf, kind, uint(k), 2, 0, uint(m), 0.5, 0.5, len(body))
		if delta {
			binary.BigEndian.PutUint64(buf[16:], 1)
		}
		b := seal(append(buf, body...))
		p, err := Decode(b)
		if err != nil {
			return
		}
		var flips []uint64
		p.EachFlip(func(x uint64) { flips = append(flips, x) })
		if len(flips) != p.FlipCount {
			t.Fatalf("%d flips read, %d counted", len(flips), p.FlipCount)
		}
		for i := 1; i < len(flips); i++ {
			if flips[i] <= flips[i-1] {
				t.Fatalf("flips not increasing: %v", flips)
			}
		}
		for _, x := range flips {
			if x >= uint64(p.M) {
				t.Fatalf("flip %d beyond m %d", x, p.M)
			}
		}
		var r Replica
		if !delta {
			if err := r.Apply(b); err != nil {
				t.Fatalf("decoded but not applied: %v", err)
			}
		}
	})
}
