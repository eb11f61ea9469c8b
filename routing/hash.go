// Package routing decides which caches play which part of a page's
// delivery: a consistent-hash ring with the paper's O(1) segment index
// (Karger et al., STOC 1997), per-page random d-ary trees whose ranks are
// mapped onto the ring, views swapped atomically, and the per-(page, rank)
// request counters of the q-rule. Lookups take no lock and allocate nothing.
package routing

import (
	"encoding/binary"

	"github.com/cespare/xxhash/v2"
)

// hashSeed is fixed so every process, on every machine and in every
// release, maps the same keys to the same points. Never use a per-process
// seed here: nodes must agree.
const hashSeed = 0x5eed_ed6e_c0de_2026

// KeyHash hashes a cache key onto the ring's 64-bit space.
func KeyHash(key string) uint64 {
	d := xxhash.NewWithSeed(hashSeed)
	_, _ = d.WriteString(key)
	return d.Sum64()
}

// pointHash places replica i of a node. The encoding is unambiguous: the
// length of the id, the id, then the replica number, so ("ab", 1) and
// ("a", ...) can never produce the same input bytes.
func pointHash(id string, replica int) uint64 {
	var buf [8]byte
	d := xxhash.NewWithSeed(hashSeed)
	binary.BigEndian.PutUint64(buf[:], uint64(len(id)))
	_, _ = d.Write(buf[:])
	_, _ = d.WriteString(id)
	binary.BigEndian.PutUint64(buf[:], uint64(replica))
	_, _ = d.Write(buf[:])
	return d.Sum64()
}

// rankHash is hash(x, i) of the paper: where rank i of page x's tree lands
// on the ring. It hashes the fixed 16-byte encoding of (key hash, rank) and
// allocates nothing.
func rankHash(keyHash uint64, rank int) uint64 {
	var buf [16]byte
	binary.BigEndian.PutUint64(buf[:8], keyHash)
	binary.BigEndian.PutUint64(buf[8:], uint64(rank))
	return xxhash.Sum64(buf[:]) ^ hashSeed
}

// scoreHash is the rendezvous score of a node for a page.
func scoreHash(keyHash, nodeHash uint64) uint64 {
	var buf [16]byte
	binary.BigEndian.PutUint64(buf[:8], keyHash)
	binary.BigEndian.PutUint64(buf[8:], nodeHash)
	return xxhash.Sum64(buf[:])
}
