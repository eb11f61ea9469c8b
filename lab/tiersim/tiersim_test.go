package tiersim

import (
	"math/rand/v2"
	"testing"
)

func zipfTrace(n int) []Request {
	rng := rand.New(rand.NewPCG(1, 2))
	z := rand.NewZipf(rng, 1.1, 1, 9999)
	out := make([]Request, n)
	for i := range out {
		id := z.Uint64()
		out[i] = Request{ID: id, Size: int64(1000 + id%7*1000)}
	}
	return out
}

func TestDiskTierAddsHitsAndTinyLFUWritesLess(t *testing.T) {
	reqs := zipfTrace(50000)
	ramOnly, err := Simulate(reqs, Config{RAMBytes: 200_000, Admission: "lru"})
	if err != nil {
		t.Fatal(err)
	}
	lru, _ := Simulate(reqs, Config{RAMBytes: 200_000, DiskBytes: 2_000_000, Admission: "lru", PromoteHits: 1})
	tlfu, _ := Simulate(reqs, Config{RAMBytes: 200_000, DiskBytes: 2_000_000, Admission: "tinylfu", PromoteHits: 1})
	if lru.ObjectHitRatio <= ramOnly.ObjectHitRatio || lru.DiskHits == 0 {
		t.Fatalf("disk tier did not add hits: RAM only %.3f, with disk %.3f", ramOnly.ObjectHitRatio, lru.ObjectHitRatio)
	}
	if tlfu.DiskWriteBytes >= lru.DiskWriteBytes {
		t.Fatalf("TinyLFU wrote %d bytes, LRU %d: admission should write less", tlfu.DiskWriteBytes, lru.DiskWriteBytes)
	}
	if lru.Hits != lru.RAMHits+lru.DiskHits || lru.HitBytes > lru.Bytes {
		t.Fatalf("inconsistent counts: %+v", lru)
	}
	// An unbounded disk holds everything: only first requests miss.
	all, _ := Simulate(reqs, Config{RAMBytes: 200_000, DiskBytes: 1 << 40, Admission: "lru"})
	distinct := map[uint64]bool{}
	for _, q := range reqs {
		distinct[q.ID] = true
	}
	if all.Requests-all.Hits != int64(len(distinct)) {
		t.Fatalf("misses with an unbounded disk = %d, want %d (compulsory only)", all.Requests-all.Hits, len(distinct))
	}
}

func TestBadConfig(t *testing.T) {
	if _, err := Simulate(nil, Config{}); err == nil {
		t.Fatal("zero RAM budget accepted")
	}
	if _, err := Simulate(nil, Config{RAMBytes: 1, Admission: "arc"}); err == nil {
		t.Fatal("unknown admission accepted")
	}
}
