package proxy

import (
	"math/rand/v2"
	"strings"
	"sync"

	"github.com/edgecache/edge/internal/ranking"
)

// hotKeys finds the most requested URL keys with the space-saving
// algorithm (Metwally et al.) over a random sample of requests (one in
// hotSampleEvery), so the hit path pays one random draw. The sample is
// random, not every n-th request, so periodic traffic cannot alias it.
type hotKeys struct {
	mu     sync.Mutex
	counts map[string]uint64
	k      int
}

const hotSampleEvery = 16

func newHotKeys(k int) *hotKeys { return &hotKeys{counts: make(map[string]uint64, k), k: k} }

func (h *hotKeys) observe(key string) {
	if rand.Uint32()%hotSampleEvery != 0 {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, ok := h.counts[key]; ok {
		h.counts[key]++
		return
	}
	key = strings.Clone(key) // the map keeps it: the caller's may be a view of a buffer it reuses (AppendHit)
	if len(h.counts) < h.k {
		h.counts[key] = 1
		return
	}
	// Replace the least counted key; the newcomer inherits its count.
	minKey, minVal := "", ^uint64(0)
	for k, v := range h.counts {
		if v < minVal {
			minKey, minVal = k, v
		}
	}
	delete(h.counts, minKey)
	h.counts[key] = minVal + 1
}

// HotKey is a key with its estimated request count.
type HotKey struct {
	Key      string `json:"key"`
	Requests uint64 `json:"requests_estimate"`
}

// top returns the n most requested keys, scaled back from the sample.
func (h *hotKeys) top(n int) []HotKey {
	h.mu.Lock()
	out := make([]HotKey, 0, len(h.counts))
	for k, v := range h.counts {
		out = append(out, HotKey{k, v * hotSampleEvery})
	}
	h.mu.Unlock()
	ranking.ByCount(out, func(k HotKey) uint64 { return k.Requests }, func(k HotKey) string { return k.Key })

	return out[:min(n, len(out))]
}
