package routing

import (
	"strconv"
	"testing"
)

var sink int

func benchKeys() []string {
	ks := make([]string, 4096)
	for i := range ks {
		ks[i] = "/assets/page-" + strconv.Itoa(i) + ".html"
	}
	return ks
}

// BenchmarkOwner hashes a key and looks up its owner: what a request pays.
func BenchmarkOwner(b *testing.B) {
	keys := benchKeys()
	for _, c := range []int{10, 100, 1000} {
		r := mustRing(b, nodeIDs(c), DefaultVNodes)
		b.Run("C="+strconv.Itoa(c), func(b *testing.B) {
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				sink += r.Lookup(KeyHash(keys[i&4095]))
				i++
			}
		})
	}
}

// BenchmarkLookup is the ring lookup alone, on precomputed hashes.
func BenchmarkLookup(b *testing.B) {
	hs := simKeys(4096)
	for _, c := range []int{10, 100, 1000} {
		r := mustRing(b, nodeIDs(c), DefaultVNodes)
		b.Run("C="+strconv.Itoa(c), func(b *testing.B) {
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				sink += r.Lookup(hs[i&4095])
				i++
			}
		})
	}
}

// BenchmarkTreePath computes a page's path from a random leaf (d = 4).
func BenchmarkTreePath(b *testing.B) {
	hs := simKeys(4096)
	for _, c := range []int{10, 100, 1000} {
		r := mustRing(b, nodeIDs(c), DefaultVNodes)
		tr := Tree{Size: c, Arity: 4}
		buf := make([]Hop, 0, 16)
		b.Run("C="+strconv.Itoa(c), func(b *testing.B) {
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				buf = r.AppendPath(buf[:0], hs[i&4095], tr, tr.Size-(i%3), PlacementPaper, nil)
				i++
			}
			sink += len(buf)
		})
	}
}
