package routing

import (
	"math"
	"sync/atomic"

	lru "github.com/hashicorp/golang-lru/v2"
)

// Counters count requests per (page, rank) for the q-rule: a cache playing
// rank i for page x stores x once it has forwarded q requests for it, so
// every internal node forwards at most q requests per page and the origin
// sees at most d·q fetches. Counters live in a bounded LRU: a forgotten
// counter only delays storing a page that has gone cold.
type Counters struct {
	q     int
	cache *lru.Cache[counterKey, *atomic.Int32]
}

type counterKey struct {
	page uint64
	rank int32
}

// NewCounters keeps at most size counters with threshold q.
func NewCounters(size, q int) *Counters {
	c, err := lru.New[counterKey, *atomic.Int32](max(size, 1))
	if err != nil {
		panic(err) // only for size <= 0, excluded above
	}
	return &Counters{q: max(q, 1), cache: c}
}

// Q returns the threshold.
func (c *Counters) Q() int { return c.q }

// Observe counts one request for page at rank and reports whether the
// cache should store the page when it arrives: true once q requests were
// seen. Safe for concurrent use; concurrent requests count exactly.
func (c *Counters) Observe(page uint64, rank int) (count int, store bool) {
	k := counterKey{page, int32(rank)}
	ctr, ok := c.cache.Get(k)
	if !ok {
		fresh := new(atomic.Int32)
		if prev, found, _ := c.cache.PeekOrAdd(k, fresh); found {
			ctr = prev
		} else {
			ctr = fresh
		}
	}
	n := int(ctr.Add(1))
	if n < 0 {
		// Past 2^31 requests: stay at the top rather than wrap to a
		// negative count, which made a page seen that often cold again
		// (a review). Concurrent adds past the top are undone the same way.
		ctr.Store(math.MaxInt32)
		n = math.MaxInt32
	}
	return n, n >= c.q
}

// Peek returns the count for (page, rank) without counting, and whether
// it has reached q.
func (c *Counters) Peek(page uint64, rank int) (int, bool) {
	ctr, ok := c.cache.Peek(counterKey{page, int32(rank)})
	if !ok {
		return 0, false
	}
	n := int(ctr.Load())
	return n, n >= c.q
}

// Len returns the number of counters held.
func (c *Counters) Len() int { return c.cache.Len() }
