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
	mu sync.Mutex
	// counts maps a key to its count. The count is behind a pointer so
	// that counting a known key never assigns to the map: an assignment
	// replaces the stored key with the caller's string, and the hit path
	// passes a view of a buffer it reuses (AppendHit).
	counts map[string]*uint64
	k      int
}

const hotSampleEvery = 16

func newHotKeys(k int) *hotKeys { return &hotKeys{counts: make(map[string]*uint64, k), k: k} }

func (h *hotKeys) observe(key string) {
	if rand.Uint32()%hotSampleEvery != 0 {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if n, ok := h.counts[key]; ok {
		*n++
		return
	}
	key = strings.Clone(key) // the map keeps it: the caller's may be a view
	if len(h.counts) < h.k {
		n := uint64(1)
		h.counts[key] = &n
		return
	}
	// Replace the least counted key; the newcomer inherits its count.
	minKey, minVal := "", ^uint64(0)
	for k, v := range h.counts {
		if *v < minVal {
			minKey, minVal = k, *v
		}
	}
	n := h.counts[minKey]
	delete(h.counts, minKey)
	*n = minVal + 1
	h.counts[key] = n
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
		out = append(out, HotKey{k, *v * hotSampleEvery})
	}
	h.mu.Unlock()
	ranking.ByCount(out, func(k HotKey) uint64 { return k.Requests }, func(k HotKey) string { return k.Key })

	return out[:min(n, len(out))]
}
