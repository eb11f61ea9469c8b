package indicators

// PROPERTY (holds). Differential test of bc8b158's delta decoding
// (Decode's walkFlips check, Payload.EachFlip on apply) against the
// decoder before it (5bf218f, copied below as s42OldFlips, which kept a
// []uint64): for every delta body, if the old decoder accepted it with
// every uvarint in its shortest form, the new one accepts it and
// EachFlip yields exactly the old positions, in order; if the new one
// accepts it, the old one did, with the same positions. The only
// payloads the new decoder refuses that the old accepted are those with
// a non-minimal uvarint. Also: a delta applied to a replica flips
// exactly those positions (checked against a bitset built by hand).

import (
	"encoding/binary"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/bits-and-blooms/bitset"
)

// s42OldFlips is 5bf218f's delta body parser; minimal reports whether
// every uvarint was in its shortest form.
func s42OldFlips(body []byte, m uint64) (flips []uint64, minimal bool, ok bool) {
	n := len(body)
	minimal = true
	count, k := binary.Uvarint(body)
	if k <= 0 || count > m || count > uint64(n) {
		return nil, minimal, false
	}
	if k > 1 && body[k-1] == 0 {
		minimal = false
	}
	body = body[k:]
	pos := uint64(0)
	for i := uint64(0); i < count; i++ {
		gap, k := binary.Uvarint(body)
		if k <= 0 {
			return nil, minimal, false
		}
		if k > 1 && body[k-1] == 0 {
			minimal = false
		}
		body = body[k:]
		if i > 0 && gap == 0 {
			return nil, minimal, false
		}
		if gap > m || pos+gap >= m {
			return nil, minimal, false
		}
		pos += gap
		flips = append(flips, pos)
	}
	if len(body) != 0 {
		return nil, minimal, false
	}
	return flips, minimal, true
}

func s42Check(t *testing.T, m uint64, body []byte) (accepted bool) {
	t.Helper()
	old, minimal, oldOK := s42OldFlips(body, m)
	p, err := Decode(s41Delta(m, 3, body))
	newOK := err == nil
	var got []uint64
	if newOK {
		p.EachFlip(func(x uint64) { got = append(got, x) })
	}
	switch {
	case newOK && !oldOK:
		t.Fatalf("m %d body %x: new accepts %v, old refused", m, body, got)
	case oldOK && minimal && !newOK:
		t.Fatalf("m %d body %x: old accepts %v (minimal), new refuses: %v", m, body, old, err)
	case oldOK && !minimal && newOK:
		t.Fatalf("m %d body %x: non-minimal accepted", m, body)
	case newOK && !slices.Equal(got, old) && (len(got) != 0 || len(old) != 0):
		t.Fatalf("m %d body %x: new %v, old %v", m, body, got, old)
	case newOK && len(got) != p.FlipCount:
		t.Fatalf("FlipCount %d, %d yielded", p.FlipCount, len(got))
	}
	return newOK
}

func TestS42EachFlipAgreesWithTheOldDecoder(t *testing.T) {
	rng := rand.New(rand.NewPCG(4, 2))
	accepted := 0
	for range 200000 {
		m := uint64(1 + rng.IntN(300))
		if rng.IntN(10) == 0 {
			m = uint64(1 + rng.Int64N(MaxBits))
		}
		var body []byte
		switch rng.IntN(3) {
		case 0: // random bytes
			body = make([]byte, rng.IntN(12))
			for i := range body {
				body[i] = byte(rng.IntN(256))
				if rng.IntN(3) == 0 {
					body[i] &= 0x7f
				}
			}
		default: // an encoder-like body, perhaps mutated
			var pos []uint64
			for x := range min(m, 200) {
				if rng.IntN(4) == 0 {
					pos = append(pos, x*(m/min(m, 200)))
				}
			}
			body = binary.AppendUvarint(nil, uint64(len(pos)))
			prev := uint64(0)
			for _, x := range pos {
				body = binary.AppendUvarint(body, x-prev)
				prev = x
			}
			if rng.IntN(2) == 0 && len(body) > 0 {
				i := rng.IntN(len(body))
				switch rng.IntN(3) {
				case 0:
					body[i] ^= byte(1 << rng.IntN(8))
				case 1:
					body = slices.Insert(body, i, byte(rng.IntN(256)))
				case 2:
					body = slices.Delete(body, i, i+1)
				}
			}
		}
		if s42Check(t, m, body) {
			accepted++
		}
	}
	t.Logf("%d bodies accepted by both", accepted)
}

func FuzzS42EachFlipAgreesWithTheOldDecoder(f *testing.F) {
	f.Add(uint64(64), []byte{1, 3})
	f.Add(uint64(1000), []byte{3, 0, 1, 1})
	f.Add(uint64(64), []byte{1, 0x83, 0x00})
	f.Fuzz(func(t *testing.T, m uint64, body []byte) {
		if m == 0 || m > MaxBits {
			return
		}
		s42Check(t, m, body)
	})
}

// A delta applied flips exactly EachFlip's positions.
func TestS42ApplyFlipsExactlyThePositions(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 9))
	for range 200 {
		m := uint(64 + rng.IntN(2000))
		prev := bitset.New(m)
		for range rng.IntN(50) {
			prev.Set(uint(rng.IntN(int(m))))
		}
		next := prev.Clone()
		for range rng.IntN(50) {
			next.Flip(uint(rng.IntN(int(m))))
		}
		var r Replica
		if err := r.Apply(EncodeFull(Snapshot{Epoch: 1, M: m, K: 3, Bits: prev})); err != nil {
			t.Fatal(err)
		}
		if err := r.Apply(EncodeDelta(Snapshot{Epoch: 2, M: m, K: 3, Bits: next, Prev: prev})); err != nil {
			t.Fatal(err)
		}
		got := r.filter.BitSet()
		for i := range m {
			if got.Test(i) != next.Test(i) {
				t.Fatalf("m %d: bit %d applied %v, want %v", m, i, got.Test(i), next.Test(i))
			}
		}
	}
}
