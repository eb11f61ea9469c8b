// Package bench compares edge's ring with the consistent-hash rings a user
// would otherwise pick, on the same keys in the same run. It is a separate
// module so that the product's go.mod carries none of them.
package bench

import (
	"strconv"
	"testing"

	"github.com/cespare/xxhash/v2"
	jump "github.com/dgryski/go-jump"
	"github.com/golang/groupcache/consistenthash"
	"github.com/serialx/hashring"

	"github.com/edgecache/edge/routing"
)

var sink int

func keys() []string {
	ks := make([]string, 4096)
	for i := range ks {
		ks[i] = "/assets/page-" + strconv.Itoa(i) + ".html"
	}
	return ks
}

func ids(c int) []string {
	out := make([]string, c)
	for i := range out {
		out[i] = "node-" + strconv.Itoa(i)
	}
	return out
}

const vnodes = 160

var sizes = []int{10, 100, 1000}

// BenchmarkEdge: edge's ring, key hashing included.
func BenchmarkEdge(b *testing.B) {
	ks := keys()
	for _, c := range sizes {
		var ms []routing.Member
		for _, id := range ids(c) {
			ms = append(ms, routing.Member{ID: id})
		}
		r, err := routing.NewRing(ms, vnodes)
		if err != nil {
			b.Fatal(err)
		}
		b.Run("C="+strconv.Itoa(c), func(b *testing.B) {
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				sink += r.Lookup(routing.KeyHash(ks[i&4095]))
				i++
			}
		})
	}
}

// BenchmarkGroupcache: golang/groupcache/consistenthash (crc32, binary search).
func BenchmarkGroupcache(b *testing.B) {
	ks := keys()
	for _, c := range sizes {
		m := consistenthash.New(vnodes, nil)
		m.Add(ids(c)...)
		b.Run("C="+strconv.Itoa(c), func(b *testing.B) {
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				sink += len(m.Get(ks[i&4095]))
				i++
			}
		})
	}
}

// BenchmarkGroupcacheXXHash: groupcache's ring with edge's hash function,
// to separate the hash from the search.
func BenchmarkGroupcacheXXHash(b *testing.B) {
	ks := keys()
	for _, c := range sizes {
		m := consistenthash.New(vnodes, func(d []byte) uint32 { return uint32(xxhash.Sum64(d)) })
		m.Add(ids(c)...)
		b.Run("C="+strconv.Itoa(c), func(b *testing.B) {
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				sink += len(m.Get(ks[i&4095]))
				i++
			}
		})
	}
}

// BenchmarkSerialxHashring: serialx/hashring (md5 points, binary search).
func BenchmarkSerialxHashring(b *testing.B) {
	ks := keys()
	for _, c := range sizes {
		weights := map[string]int{}
		for _, id := range ids(c) {
			weights[id] = 1
		}
		r := hashring.NewWithWeights(weights)
		b.Run("C="+strconv.Itoa(c), func(b *testing.B) {
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				n, _ := r.GetNode(ks[i&4095])
				sink += len(n)
				i++
			}
		})
	}
}

// BenchmarkJump: Lamping and Veach's jump hash, the no-ring alternative
// (monotone only for adding buckets at the end; no weights, no arbitrary removal).
func BenchmarkJump(b *testing.B) {
	ks := keys()
	for _, c := range sizes {
		b.Run("C="+strconv.Itoa(c), func(b *testing.B) {
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				sink += int(jump.Hash(xxhash.Sum64String(ks[i&4095]), c))
				i++
			}
		})
	}
}
