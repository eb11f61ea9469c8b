// Package tiersim replays a trace through a model of the edge's two cache
// tiers (a RAM LRU written through to a disk tier, both bounded in bytes)
// to choose the disk tier's policies from data: LRU eviction alone, or LRU
// behind a TinyLFU admission filter (Einziger, Friedman and Manes, 2017: a
// new object enters a full cache only if its estimated frequency beats
// that of the object it would evict), and promotion of disk hits to RAM on
// the first or the second hit.
package tiersim

import (
	"errors"
	"fmt"

	"github.com/hashicorp/golang-lru/v2/simplelru"

	"github.com/edgecache/edge/internal/sketch"
)

// Request is one trace request: an object and its size in bytes.
type Request struct {
	ID   uint64
	Size int64
}

// Config is one simulated node.
type Config struct {
	RAMBytes    int64  // RAM tier budget
	DiskBytes   int64  // disk tier budget (0: RAM only)
	Admission   string // "lru" (admit everything) or "tinylfu"
	PromoteHits int    // disk hit on which an object is copied to RAM
	// DiskOnlyBytes: objects at least this large skip RAM (0: RAM/16).
	DiskOnlyBytes int64
}

// Result is what the replay measured.
type Result struct {
	Config
	Requests, Hits, RAMHits, DiskHits int64
	Bytes, HitBytes                   int64
	DiskWriteBytes                    int64 // bytes written to disk (wear, and write bandwidth)
	ObjectHitRatio, ByteHitRatio      float64
}

type tier struct {
	lru    *simplelru.LRU[uint64, int64]
	bytes  int64
	budget int64
}

func newTier(budget int64) *tier {
	t := &tier{budget: budget}
	t.lru, _ = simplelru.NewLRU[uint64, int64](1<<31-1, func(_ uint64, size int64) { t.bytes -= size })
	return t
}

func (t *tier) add(id uint64, size int64) {
	if old, ok := t.lru.Peek(id); ok {
		t.bytes -= old
	}
	t.lru.Add(id, size)
	t.bytes += size
	for t.bytes > t.budget {
		t.lru.RemoveOldest()
	}
}

// Simulate replays reqs through the tiers.
func Simulate(reqs []Request, c Config) (Result, error) {
	if c.RAMBytes <= 0 {
		return Result{}, errors.New("tiersim: RAM budget must be positive")
	}
	if c.Admission != "lru" && c.Admission != "tinylfu" {
		return Result{}, fmt.Errorf("tiersim: admission %q: want lru or tinylfu", c.Admission)
	}
	if c.PromoteHits <= 0 {
		c.PromoteHits = 1
	}
	if c.DiskOnlyBytes <= 0 {
		c.DiskOnlyBytes = max(c.RAMBytes/16, 1)
	}
	ram := newTier(c.RAMBytes)
	var disk *tier
	if c.DiskBytes > 0 {
		disk = newTier(c.DiskBytes)
	}
	diskHits := map[uint64]int{}
	// The sketch is sized for the objects the disk can hold at the
	// trace's mean size, as the tier sizes its own.
	var total int64
	for _, q := range reqs {
		total += q.Size
	}
	mean := max(total/int64(max(len(reqs), 1)), 1)
	freq := sketch.New(int(max(c.DiskBytes, c.RAMBytes) / mean))
	r := Result{Config: c}
	for _, q := range reqs {
		r.Requests++
		r.Bytes += q.Size
		freq.Add(q.ID)
		if _, ok := ram.lru.Get(q.ID); ok {
			r.Hits++
			r.RAMHits++
			r.HitBytes += q.Size
			continue
		}
		if disk != nil {
			if _, ok := disk.lru.Get(q.ID); ok {
				r.Hits++
				r.DiskHits++
				r.HitBytes += q.Size
				diskHits[q.ID]++
				if diskHits[q.ID] >= c.PromoteHits && q.Size < c.DiskOnlyBytes {
					ram.add(q.ID, q.Size)
				}
				continue
			}
		}
		// A miss: the fill is stored in RAM (unless large) and written
		// through to disk, subject to admission.
		delete(diskHits, q.ID)
		if q.Size < c.DiskOnlyBytes && q.Size <= c.RAMBytes {
			ram.add(q.ID, q.Size)
		}
		if disk == nil || q.Size > c.DiskBytes {
			continue
		}
		if c.Admission == "tinylfu" && disk.bytes+q.Size > disk.budget {
			victim, _, ok := disk.lru.GetOldest()
			if ok && freq.Estimate(q.ID) <= freq.Estimate(victim) {
				continue // not admitted: the victim is the more popular
			}
		}
		disk.add(q.ID, q.Size)
		r.DiskWriteBytes += q.Size
	}
	if r.Requests > 0 {
		r.ObjectHitRatio = float64(r.Hits) / float64(r.Requests)
	}
	if r.Bytes > 0 {
		r.ByteHitRatio = float64(r.HitBytes) / float64(r.Bytes)
	}
	return r, nil
}
