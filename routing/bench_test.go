package routing

import (
	"fmt"
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

// BenchmarkNewRing is one view rebuild: every local suspicion and every
// membership change builds the ring again, so at 100 members its cost is
// paid on every node at every change.
func BenchmarkNewRing(b *testing.B) {
	for _, n := range []int{5, 25, 100} {
		members := make([]Member, n)
		for i := range members {
			members[i] = Member{ID: fmt.Sprintf("m%03d", i)}
		}
		b.Run(fmt.Sprintf("members=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := NewRing(members, DefaultVNodes); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkViewChange is what a suspicion or a join costs a Router at 100
// members: one member out of the view, then back in.
func BenchmarkViewChange(b *testing.B) {
	members := make([]Member, 100)
	for i := range members {
		members[i] = Member{ID: fmt.Sprintf("m%03d", i)}
	}
	without := members[1:]
	r := NewRouter(DefaultVNodes)
	if err := r.SetView(members); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		view := members
		if i%2 == 0 {
			view = without
		}
		if err := r.SetView(view); err != nil {
			b.Fatal(err)
		}
	}
}
