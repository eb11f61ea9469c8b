package indicators

import (
	"fmt"
	"math"
	"sync"

	"github.com/bits-and-blooms/bitset"
	"github.com/bits-and-blooms/bloom/v3"
)

// FilterConfig sizes a cache's indicator.
type FilterConfig struct {
	Capacity       int     // C: the most items the cache holds
	BitsPerElement float64 // bpe: m = bpe·C bits, k = ⌊bpe·ln 2⌋ hash functions
	UpdateInterval int     // U: advertise after this many insertions
	EstimateEvery  int     // recompute fpr and fnr after this many insertions
	// FNREstimator is how fnr is estimated (the zero value: the paper's).
	FNREstimator FNREstimator
	// Counting keeps the up-to-date filter as a counting Bloom filter from
	// which Evict removes the key, as the authors' simulator does: bits of
	// evicted keys clear between advertisements, so B1_up counts only the
	// bits of keys the cache holds, which is what fnr's estimate divides
	// by, and Δ0 (bits set in the advertised snapshot and clear now) is
	// nonzero. fpr does not change: B1_up − Δ1 + Δ0 is the snapshot's B1
	// either way. Without it (a node's store does not report evictions key
	// by key) the up-to-date filter only gains bits until the next
	// advertisement rebuilds it.
	Counting bool
}

// DefaultFilterConfig matches the paper's main setting.
func DefaultFilterConfig(capacity int) FilterConfig {
	return FilterConfig{
		Capacity:       capacity,
		BitsPerElement: 14,      // the paper's bpe: fpr ≈ 0.1 % on a fresh filter
		UpdateInterval: 1000,    // U: the paper's headline interval
		EstimateEvery:  50,      // cheap enough to piggyback on every heartbeat
		FNREstimator:   FNRBits, // the paper's estimate: measured best with fna-home (docs/indicators.md); count helps plain fna at large U
	}
}

// Params returns m and k for the configuration.
func (c FilterConfig) Params() (m, k uint) {
	m = uint(math.Max(64, math.Ceil(c.BitsPerElement*float64(c.Capacity))))
	k = uint(math.Max(1, math.Floor(c.BitsPerElement*math.Ln2)))
	return m, k
}

// Filter is the cache side of an indicator: an up-to-date Bloom filter of
// the cache's keys and the snapshot it last advertised. Between
// advertisements the up-to-date filter only gains bits (a Bloom filter
// cannot forget an evicted key); each advertisement rebuilds it from the
// current key set, so evictions leave it then.
type Filter struct {
	cfg  FilterConfig
	m, k uint

	mu         sync.Mutex
	up         *bloom.BloomFilter // up-to-date
	adv        *bloom.BloomFilter // as last advertised
	epoch      uint64
	sinceAdv   int
	sinceEst   int
	fpr, fnr   float64
	advertised int      // advertisements made
	advKeys    int      // keys in the last advertisement
	held       int      // keys the cache holds: advKeys + insertions − evictions
	missed     int      // held keys the advertised snapshot tests negative for ("exact")
	counts     []uint16 // Counting: keys setting each bit of up (saturating)
}

// NewFilter returns an empty filter (epoch 0, nothing advertised yet).
func NewFilter(cfg FilterConfig) (*Filter, error) {
	if cfg.Capacity < 1 || cfg.BitsPerElement <= 0 || cfg.UpdateInterval < 1 || cfg.EstimateEvery < 1 {
		return nil, fmt.Errorf("indicators: filter config %+v: capacity, bpe, update interval and estimate interval must be positive", cfg)
	}
	if cfg.FNREstimator < 0 || int(cfg.FNREstimator) >= len(fnrEstimatorNames) {
		return nil, fmt.Errorf("indicators: %v is not an fnr estimator", cfg.FNREstimator)
	}
	m, k := cfg.Params()
	if m > MaxBits {
		// Peers refuse a larger advertisement (Decode), so the filter
		// would cost its memory and tell nobody anything.
		return nil, fmt.Errorf("indicators: capacity %d × bpe %v is a filter of %d bits, over the %d a peer accepts", cfg.Capacity, cfg.BitsPerElement, m, uint64(MaxBits))
	}
	f := &Filter{cfg: cfg, m: m, k: k, up: bloom.New(m, k), adv: bloom.New(m, k)}
	if cfg.Counting {
		f.counts = make([]uint16, m)
	}
	return f, nil
}

// M and K return the filter's size in bits and its number of hash functions.
func (f *Filter) M() uint { return f.m }

// K returns the number of hash functions.
func (f *Filter) K() uint { return f.k }

// Insert adds a key that has just entered the cache and reports whether an
// advertisement is due (U insertions since the last one).
func (f *Filter) Insert(key []byte) (advertise bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.up.Add(key)
	f.count(key, 1)
	f.held++
	if !f.adv.Test(key) {
		f.missed++
	}
	return f.countInsertionLocked()
}

// Reinsert counts an insertion of a key the cache already held towards U
// without changing the filter: the indicator paper's simulator does so for
// the re-insertion that follows a false-negative miss.
func (f *Filter) Reinsert() (advertise bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.countInsertionLocked()
}

// Evict records that a key left the cache. A plain Bloom filter cannot
// forget it, so only the "exact" estimator's counts change and the next
// advertisement drops it from the filter; a counting filter removes it now.
func (f *Filter) Evict(key []byte) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.count(key, -1)
	if f.held > 0 {
		f.held--
	}
	if f.missed > 0 && !f.adv.Test(key) {
		f.missed--
	}
}

// count adds delta to the counters of key's bits (Counting only), setting
// a bit of the up-to-date filter when its counter leaves 0 and clearing it
// when it returns there. A counter that saturated stays saturated: its bit
// is never cleared (the usual counting-filter rule, so a removal never
// causes a false negative for a key still held).
func (f *Filter) count(key []byte, delta int) {
	if f.counts == nil {
		return
	}
	locs := bloom.Locations(key, f.k)
	if delta < 0 {
		for _, loc := range locs {
			if f.counts[loc%uint64(f.m)] == 0 {
				// Not in the filter (never inserted, or evicted twice):
				// removing it would clear bits of keys still held.
				return
			}
		}
	}
	bs := f.up.BitSet()
	for _, loc := range locs {
		i := uint(loc % uint64(f.m))
		switch c := f.counts[i]; {
		case c == math.MaxUint16:
		case delta > 0:
			f.counts[i]++
			bs.Set(i)
		case c > 0:
			f.counts[i]--
			if c == 1 {
				bs.Clear(i)
			}
		}
	}
}

func (f *Filter) countInsertionLocked() bool {
	f.sinceAdv++
	f.sinceEst++
	if f.sinceEst >= f.cfg.EstimateEvery {
		f.estimateLocked()
	}
	return f.sinceAdv >= f.cfg.UpdateInterval
}

// estimateLocked recomputes fpr and fnr from bit counts, as the authors:
//
//	fnr = 1 − ((B1_up − Δ1) / B1_up)^k,   fpr = ((B1_up − Δ1 + Δ0) / m)^k
//
// where Δ1 counts bits set in the up-to-date filter and clear in the
// advertised one (a held key whose bits all fall outside Δ1 still tests
// positive on the stale replica) and Δ0 bits clear in the up-to-date filter
// and set in the advertised one. B1_up − Δ1 + Δ0 is the advertised
// snapshot's B1 exactly, so fpr is read as (B1_adv/m)^k (one count, not
// two differences); Δ0 is 0 unless the filter is Counting.
func (f *Filter) estimateLocked() {
	f.sinceEst = 0
	b1up := float64(f.up.BitSet().Count())
	b1adv := float64(f.adv.BitSet().Count()) // = B1_up − Δ1 + Δ0
	delta1 := float64(f.up.BitSet().DifferenceCardinality(f.adv.BitSet()))
	k := float64(f.k)
	f.fpr = math.Pow(b1adv/float64(f.m), k)
	switch {
	case b1up == 0:
		f.fnr = 0
	case f.cfg.FNREstimator == FNRCount:
		// The keys inserted since the advertisement are the only ones the
		// replica can miss; each tests positive anyway with probability fpr.
		// LRU evicts old keys first, so new keys are still held.
		held := min(f.advKeys+f.sinceAdv, f.cfg.Capacity)
		if held > 0 {
			f.fnr = float64(min(f.sinceAdv, held)) / float64(held) * (1 - f.fpr)
		}
	case f.cfg.FNREstimator == FNRExact:
		// Caches that do not report evictions (the node's store) are
		// bounded by capacity: an LRU evicts old, advertised keys first.
		held := min(f.held, f.cfg.Capacity)
		if held > 0 {
			f.fnr = float64(min(f.missed, held)) / float64(held)
		}
	default:
		f.fnr = 1 - math.Pow((b1up-delta1)/b1up, k)
	}
}

// Estimates returns the current (fpr, fnr) of the advertised snapshot.
func (f *Filter) Estimates() (fpr, fnr float64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	// Probabilities whatever an estimator's arithmetic gave: heartbeats
	// carry them, and a peer refuses one outside [0, 1] (wire.Decode).
	return clip01(f.fpr), clip01(f.fnr)
}

// Snapshot is an advertised filter.
type Snapshot struct {
	Epoch uint64
	M     uint
	K     uint
	Bits  *bitset.BitSet
	// Prev is the bit set of the previous epoch (nil for the first), from
	// which a delta can be computed.
	Prev *bitset.BitSet
	FPR  float64 // estimates at advertisement: fnr = 0, fpr = (B1/m)^k
	FNR  float64
}

// Advertise rebuilds the up-to-date filter from keys (every key the cache
// holds now), makes it the new advertised snapshot with the next epoch, and
// resets the estimates to fnr = 0, fpr = (B1/m)^k.
//
// The key set is read under the filter's lock, so that an insertion or an
// eviction racing with the advertisement is either in the snapshot or
// counted after it (the "exact" estimator's counts start from this key
// set). keys must not call back into the filter.
func (f *Filter) Advertise(keys func(yield func([]byte) bool)) Snapshot {
	f.mu.Lock()
	defer f.mu.Unlock()
	prev := f.adv.BitSet()
	f.up = bloom.New(f.m, f.k)
	if f.counts != nil {
		clear(f.counts) // rebuilt from the key set, so that a drift cannot last
	}
	n := 0
	if keys != nil {
		for key := range keys {
			f.up.Add(key)
			f.count(key, 1)
			n++
		}
	}
	f.adv = f.up.Copy()
	f.epoch++
	f.advertised++
	f.sinceAdv = 0
	f.advKeys = n
	f.held, f.missed = n, 0
	f.estimateLocked()
	return Snapshot{Epoch: f.epoch, M: f.m, K: f.k, Bits: f.adv.BitSet(), Prev: prev, FPR: f.fpr, FNR: 0}
}

// Epoch returns the last advertised epoch.
func (f *Filter) Epoch() uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.epoch
}

// Advertisements returns how many snapshots were advertised.
func (f *Filter) Advertisements() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.advertised
}
