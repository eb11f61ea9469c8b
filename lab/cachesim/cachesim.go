// Package cachesim is the indicator paper's cache simulator: one client,
// n LRU caches with stale Bloom indicators, and the selection policies
// (opt, fno, fna, fna-hist, fna-home) priced by access costs and the miss
// penalty. It is research code used by `edge sim cache`; a node runs only
// package indicators.
package cachesim

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/bits"
	"math/rand/v2"

	"github.com/hashicorp/golang-lru/v2/simplelru"

	"github.com/edgecache/edge/indicators"
)

// Config is the paper's simulation: one client, n LRU caches, each key
// homed at cache(s) chosen by hash; a miss inserts the key at its home(s);
// each cache advertises its filter every U of its insertions; the client
// pays Σc of the caches it asks plus M on a miss.
type Config struct {
	Caches         int
	CacheSize      int
	BPE            float64
	UpdateInterval int
	Costs          []float64 // one per cache; the cheapest should be 1
	MissPenalty    float64
	Replicas       int     // homes per key
	Explore        float64 // fna-hist: chance of probing the cheapest negative cache to learn ν
	FNREstimator   string  // "bits" (paper) or "count"
	Seed           uint64
}

// Result is one policy's outcome.
type Result struct {
	Policy             string  `json:"-"`
	CostPerRequest     float64 `json:"cost_per_request"`
	CostVsOpt          float64 `json:"cost_vs_opt"`
	HitRatio           float64 `json:"hit_ratio"`
	FNRatio            float64 `json:"fn_ratio"` // negative indications for keys the cache held
	FPRatio            float64 `json:"fp_ratio"` // positive indications for keys it did not hold
	CachesAsked        float64 `json:"caches_asked"`
	AdvBytesPerRequest float64 `json:"adv_bytes_per_request"`
	Advertisements     int     `json:"advertisements"`
	NegativeProbes     float64 `json:"negative_probes_per_request"`
}

// Validate checks the configuration.
func (c Config) Validate() error {
	switch {
	case c.Caches < 1 || c.Caches > indicators.MaxCandidates:
		return fmt.Errorf("indicators: caches %d, want 1..%d", c.Caches, indicators.MaxCandidates)
	case len(c.Costs) != c.Caches:
		return fmt.Errorf("indicators: %d costs for %d caches", len(c.Costs), c.Caches)
	case c.CacheSize < 1 || c.BPE <= 0 || c.UpdateInterval < 1 || c.MissPenalty < 1:
		return fmt.Errorf("indicators: cache size, bpe and update interval must be positive and the miss penalty ≥ 1")
	case c.Replicas < 1 || c.Replicas > c.Caches:
		return fmt.Errorf("indicators: replicas %d, want 1..%d", c.Replicas, c.Caches)
	}
	for _, x := range c.Costs {
		if x < 1 || math.IsNaN(x) {
			return fmt.Errorf("indicators: cost %v, costs are normalised so the cheapest is 1", x)
		}
	}
	return nil
}

type simCache struct {
	lru      *simplelru.LRU[uint64, struct{}]
	filter   *indicators.Filter
	replica  indicators.Replica
	advBytes int
}

// Simulate runs every policy on keys. "opt" is the oracle that asks the
// cheapest cache truly holding the key. Each policy runs on its own copy of
// the caches, since what it finds changes what gets inserted.
func Simulate(keys []uint64, c Config, policies []string) ([]Result, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("indicators: empty trace")
	}
	var out []Result
	var optCost float64
	for _, p := range policies {
		if p != "opt" {
			if _, err := indicators.ParsePolicy(p); err != nil {
				return nil, err
			}
		}
		r, err := simulateOne(keys, c, p)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
		if p == "opt" {
			optCost = r.CostPerRequest
		}
	}
	if optCost == 0 {
		r, err := simulateOne(keys, c, "opt")
		if err != nil {
			return nil, err
		}
		optCost = r.CostPerRequest
	}
	for i := range out {
		out[i].CostVsOpt = out[i].CostPerRequest / optCost
	}
	return out, nil
}

func simulateOne(keys []uint64, c Config, policy string) (Result, error) {
	n := c.Caches
	caches := make([]*simCache, n)
	for j := range caches {
		l, err := simplelru.NewLRU[uint64, struct{}](c.CacheSize, nil)
		if err != nil {
			return Result{}, err
		}
		f, err := indicators.NewFilter(indicators.FilterConfig{Capacity: c.CacheSize, BitsPerElement: c.BPE, UpdateInterval: c.UpdateInterval, EstimateEvery: 50, FNREstimator: c.FNREstimator})
		if err != nil {
			return Result{}, err
		}
		caches[j] = &simCache{lru: l, filter: f}
	}
	rng := rand.New(rand.NewPCG(c.Seed, 0x1d2e3f))
	res := Result{Policy: policy}
	var kb [8]byte
	key := kb[:]
	var cands [indicators.MaxCandidates]indicators.Candidate
	var truth, ind [indicators.MaxCandidates]bool
	var cost, asked, negProbes float64
	hits, fnNum, fnDen, fpNum, fpDen := 0, 0, 0, 0, 0

	insert := func(j int, x uint64) {
		sc := caches[j]
		if sc.lru.Contains(x) {
			sc.lru.Get(x)
			return
		}
		sc.lru.Add(x, struct{}{})
		if sc.filter.Insert(key) {
			snap := sc.filter.Advertise(func(yield func([]byte) bool) {
				var b [8]byte
				for _, k := range sc.lru.Keys() {
					binary.BigEndian.PutUint64(b[:], k)
					if !yield(b[:]) {
						return
					}
				}
			})
			payload, _ := indicators.Encode(snap)
			sc.advBytes += len(payload)
			if err := sc.replica.Apply(payload); err != nil {
				panic(err) // the simulator's own encoder must round-trip
			}
		}
		sc.replica.SetEstimates(sc.filter.Estimates())
	}

	for _, x := range keys {
		binary.BigEndian.PutUint64(key, x)
		for j := range n {
			truth[j] = caches[j].lru.Contains(x)
		}
		var mask uint64
		if policy == "opt" {
			best := -1
			for j := range n {
				if truth[j] && (best < 0 || c.Costs[j] < c.Costs[best]) {
					best = j
				}
			}
			if best >= 0 {
				mask = 1 << uint(best)
			}
		} else {
			learned := policy == string(indicators.FNAHist)
			homeAware := policy == string(indicators.FNAHome)
			h := x * 0x9e3779b97f4a7c15
			for j := range n {
				var e indicators.Exclusion
				switch {
				case homeAware && isHome(h, j, n, c.Replicas):
					ind[j] = caches[j].replica.IndicateHome(key)
					e = caches[j].replica.HomeExclusion()
				case homeAware:
					// Not a home: only a false positive could point here.
					ind[j] = caches[j].replica.Indicate(key)
					e = indicators.Exclusion{Pi: 1, Nu: 1}
				default:
					ind[j] = caches[j].replica.Indicate(key)
					e = caches[j].replica.Exclusion()
					if learned {
						e = caches[j].replica.LearnedExclusion()
					}
				}
				rho := e.Pi
				if !ind[j] {
					rho = e.Nu
					if policy == string(indicators.FNO) {
						rho = 1
					}
				}
				cands[j] = indicators.Candidate{Cost: c.Costs[j], Rho: rho}
				if truth[j] {
					fnDen++
					if !ind[j] {
						fnNum++
					}
				} else {
					fpDen++
					if ind[j] {
						fpNum++
					}
				}
			}
			mask = indicators.Select(cands[:n], c.MissPenalty)
			if learned && c.Explore > 0 && rng.Float64() < c.Explore {
				// Explore: also ask the cheapest negatively indicated cache
				// not chosen, so that ν can be learned from outcomes.
				best := -1
				for j := range n {
					if !ind[j] && mask&(1<<uint(j)) == 0 && (best < 0 || c.Costs[j] < c.Costs[best]) {
						best = j
					}
				}
				if best >= 0 {
					mask |= 1 << uint(best)
				}
			}
			for m := mask; m != 0; m &= m - 1 {
				j := bits.TrailingZeros64(m)
				if !ind[j] {
					negProbes++
					caches[j].replica.ObserveNegativeProbe(!truth[j])
				}
			}
		}
		hit := false
		for m := mask; m != 0; m &= m - 1 {
			j := bits.TrailingZeros64(m)
			cost += c.Costs[j]
			asked++
			if truth[j] {
				hit = true
				caches[j].lru.Get(x)
			}
		}
		if hit {
			hits++
			continue
		}
		cost += c.MissPenalty
		h := x * 0x9e3779b97f4a7c15
		for r := range c.Replicas {
			insert(homeIndex(h, r, n), x)
		}
	}
	total := float64(len(keys))
	res.CostPerRequest = cost / total
	res.HitRatio = float64(hits) / total
	res.CachesAsked = asked / total
	res.NegativeProbes = negProbes / total
	if fnDen > 0 {
		res.FNRatio = float64(fnNum) / float64(fnDen)
	}
	if fpDen > 0 {
		res.FPRatio = float64(fpNum) / float64(fpDen)
	}
	adv := 0
	for _, sc := range caches {
		adv += sc.advBytes
		res.Advertisements += sc.filter.Advertisements()
	}
	res.AdvBytesPerRequest = float64(adv) / total
	return res, nil
}

// homeIndex is the r-th home cache of a key with mixed hash h.
func homeIndex(h uint64, r, n int) int { return int((h>>32 + uint64(r)) % uint64(n)) }

func isHome(h uint64, j, n, replicas int) bool {
	for r := range replicas {
		if homeIndex(h, r, n) == j {
			return true
		}
	}
	return false
}
