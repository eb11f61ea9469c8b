// Package cachesim is the indicator paper's cache simulator: one client,
// n LRU caches with stale Bloom indicators, and the selection policies
// (opt, fno, fna, fna-hist, fna-home, fna-learned, fna-rate) priced by access costs and the miss
// penalty. It is research code used by `edge sim cache`; a node runs only
// package indicators.
package cachesim

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"

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
	Replicas       int                     // homes per key
	Explore        float64                 // fna-hist: chance of probing the cheapest negative cache to learn ν
	FNREstimator   indicators.FNREstimator // bits (the paper), count or exact
	Seed           uint64
	// Clients is how many ingress nodes share the caches, as in a cluster:
	// request i goes to client i mod Clients, and each client keeps its own
	// replicas and q estimates (every advertisement reaches all of them).
	Clients int
	// Faithful applies the authors' simulator rules instead of ours: a
	// key's home is key mod n (not a hash of it); the re-insertion that
	// follows a false-negative miss counts towards U; each cache keeps a
	// counting up-to-date filter from which the evicted key is removed (so
	// Δ0 is measured); and a client learns a cache's (fpr, fnr) only with
	// an advertisement or an answer from that cache (ours: every client
	// has every cache's latest estimates after every insertion, as the
	// cluster's heartbeats nearly do).
	Faithful bool
	// OwnFills lets every client remember the keys its own misses placed
	// at each cache since that cache's last advertisement and read them as
	// positively indicated (a local update of its replica), for every
	// policy alike. The paper's client does not, so with one client every
	// false negative is a key it placed itself; a cluster's ingress climbs
	// through the home it fills, so it never misses those either
	// (docs/indicators.md, "The client's own fills").
	OwnFills bool
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
	case c.CacheSize < 1 || c.UpdateInterval < 1:
		return fmt.Errorf("indicators: cache size %d and update interval %d must be positive", c.CacheSize, c.UpdateInterval)
	case !(c.BPE > 0 && c.BPE <= maxBPE): // NaN too
		return fmt.Errorf("indicators: bpe %v, want (0, %d] bits per element", c.BPE, maxBPE)
	case !(c.MissPenalty >= 1 && c.MissPenalty <= maxCost):
		return fmt.Errorf("indicators: miss penalty %v, want [1, %g] (costs are normalised so the cheapest access is 1)", c.MissPenalty, maxCost)
	case !(c.Explore >= 0 && c.Explore <= 1):
		return fmt.Errorf("indicators: explore %v, want a chance in [0, 1]", c.Explore)
	case c.Replicas < 1 || c.Replicas > c.Caches:
		return fmt.Errorf("indicators: replicas %d, want 1..%d", c.Replicas, c.Caches)
	case c.Clients < 0 || c.Clients > 1024:
		return fmt.Errorf("indicators: clients %d, want 0..1024 (0 means 1)", c.Clients)
	}
	for _, x := range c.Costs {
		if !(x >= 1 && x <= maxCost) {
			return fmt.Errorf("indicators: cost %v, want [1, %g]: costs are normalised so the cheapest is 1", x, maxCost)
		}
	}
	return nil
}

// Bounds of Validate: 64 bits per element is a filter with a false
// positive rate far below anything a trace can measure (the papers use
// 5–15); a cost or miss penalty above 10^9 times the cheapest access
// leaves no trade-off to simulate (and +Inf made every cost NaN).
const (
	maxBPE  = 64
	maxCost = 1e9
)

// indicate reads the client's indication for key (x as a number) at one
// cache and counts the advertised filter's answer toward the q estimates,
// toward the home-conditioned one too when countHome
// (Replica.IndicateHome). A key in own, placed there by this client's miss
// since the last advertisement, is then a positive indication for the
// selection. q counts the filter's raw answer, not the override: h =
// (q − fpr)/(1 − fpr − fnr) needs q and fnr to describe the same filter,
// and fnr counts these keys as false negatives. Counting the override
// instead (tried after a review asked for it) raised fna's estimate of h
// on web07 from 0.549 to 0.588 against a true 0.244, and its cost in all
// four own-fills runs there (a second review).
func indicate(rep *indicators.Replica, key []byte, x uint64, own map[uint64]struct{}, countHome bool) bool {
	ind := rep.Test(key)
	rep.Count(ind, countHome)
	if !ind && own != nil {
		_, ind = own[x]
	}
	return ind
}

type simCache struct {
	lru      *simplelru.LRU[uint64, struct{}]
	filter   *indicators.Filter
	replicas []indicators.Replica // one per client
	advBytes int
	// ownFills[i] holds the keys client i's misses placed here since the
	// last advertisement (Config.OwnFills): at most U new insertions, and
	// under our rules also the keys already held that a miss asked for
	// again (re-inserts count toward no advertisement).
	ownFills []map[uint64]struct{}
}

// Simulate runs every policy on keys. "opt" is the oracle that asks the
// cheapest cache truly holding the key. "neg-oracle" is fno that knows the
// truth behind each negative indication (a negative that holds the key is
// a certain hit, one that does not a certain miss) and weighs positives as
// fno does: what a policy that decides only which negatives to ask could
// reach at best, so (fno − neg-oracle)/(fno − opt) bounds the share of
// fno's excess such a policy can remove (a false positive's wasted probe
// is fno's too). Each policy runs on its own copy of the caches, since
// what it finds changes what gets inserted.
func Simulate(keys []uint64, c Config, policies []string) ([]Result, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("indicators: empty trace")
	}
	for _, p := range policies {
		if p == "opt" || p == negOracle {
			continue
		}
		if _, err := indicators.ParsePolicy(strings.TrimSuffix(p, ownSuffix)); err != nil {
			return nil, err
		}
	}
	runs := policies
	if !slices.Contains(runs, "opt") {
		runs = append(slices.Clone(runs), "opt")
	}
	// Policies are independent runs on their own caches: one goroutine each.
	res := make([]Result, len(runs))
	errs := make([]error, len(runs))
	var wg sync.WaitGroup
	for i, p := range runs {
		wg.Go(func() { res[i], errs[i] = simulateOne(keys, c, p) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	optCost := res[slices.Index(runs, "opt")].CostPerRequest
	out := res[:len(policies)]
	for i := range out {
		out[i].CostVsOpt = out[i].CostPerRequest / optCost
	}
	return out, nil
}

// negOracle names the bound Simulate describes.
const negOracle = "neg-oracle"

// ownSuffix after a policy's name (fno-own, fna-rate-own) gives its client
// a memory of its own fills: the keys its misses placed at each cache
// since that cache's last advertisement are read as positive and priced as
// certain hits. The cluster's ingress has this by its structure (it climbs
// through the home it fills, and that first hop is asked whatever its
// indicator says); the paper's client has not. With one client (the
// paper's setting) every false negative is such a fill (--own-fills reads
// them as ordinary positives, priced by the filter's estimates, for every
// policy). docs/indicators.md, "What the paper's setting's gap is".
const ownSuffix = "-own"

func simulateOne(keys []uint64, c Config, policy string) (Result, error) {
	name := policy
	trust := strings.HasSuffix(policy, ownSuffix)
	policy = strings.TrimSuffix(policy, ownSuffix)
	n := c.Caches
	clients := max(c.Clients, 1)
	caches := make([]*simCache, n)
	// fna-learned's calibration pools, per client and cache cost: the
	// cluster pools per region, and a cost here stands for a region.
	pools := make([]map[float64]*indicators.CalibrationPool, clients)
	for i := range pools {
		pools[i] = map[float64]*indicators.CalibrationPool{}
	}
	for j := range caches {
		f, err := indicators.NewFilter(indicators.FilterConfig{Capacity: c.CacheSize, BitsPerElement: c.BPE, UpdateInterval: c.UpdateInterval, EstimateEvery: 50, FNREstimator: c.FNREstimator, Counting: c.Faithful})
		if err != nil {
			return Result{}, err
		}
		l, err := simplelru.NewLRU(c.CacheSize, func(x uint64, _ struct{}) {
			var b [8]byte
			binary.BigEndian.PutUint64(b[:], x)
			f.Evict(b[:])
		})
		if err != nil {
			return Result{}, err
		}
		caches[j] = &simCache{lru: l, filter: f, replicas: make([]indicators.Replica, clients)}
		if (c.OwnFills || trust) && policy != "opt" { // the oracle reads no indications
			caches[j].ownFills = make([]map[uint64]struct{}, clients)
			for i := range caches[j].ownFills {
				caches[j].ownFills[i] = map[uint64]struct{}{}
			}
		}
		for i := range caches[j].replicas {
			pool := pools[i][c.Costs[j]]
			if pool == nil {
				pool = &indicators.CalibrationPool{}
				pools[i][c.Costs[j]] = pool
			}
			caches[j].replicas[i].SharePool(pool)
		}
	}
	home := func(x uint64, r int) int {
		if c.Faithful {
			return int((x + uint64(r)) % uint64(n))
		}
		return homeIndex(x*0x9e3779b97f4a7c15, r, n)
	}
	rng := rand.New(rand.NewPCG(c.Seed, 0x1d2e3f))
	res := Result{Policy: name}
	var kb [8]byte
	key := kb[:]
	var cands [indicators.MaxCandidates]indicators.Candidate
	var truth, ind [indicators.MaxCandidates]bool
	var derivedNu [indicators.MaxCandidates]float64 // fna-learned: ν before correction
	var negative uint64
	var cost, asked, negProbes float64
	hits, fnNum, fnDen, fpNum, fpDen := 0, 0, 0, 0, 0

	insert := func(j int, x uint64, client int) {
		sc := caches[j]
		if sc.ownFills != nil {
			sc.ownFills[client][x] = struct{}{}
		}
		var due bool
		if sc.lru.Contains(x) {
			sc.lru.Get(x)
			if !c.Faithful {
				return
			}
			due = sc.filter.Reinsert()
		} else {
			sc.lru.Add(x, struct{}{})
			due = sc.filter.Insert(key)
		}
		if due {
			for _, own := range sc.ownFills {
				clear(own) // the advertisement has them (or their eviction)
			}
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
			for i := range sc.replicas {
				if err := sc.replicas[i].Apply(payload); err != nil {
					panic(err) // the simulator's own encoder must round-trip
				}
			}
		}
		if !c.Faithful {
			fpr, fnr := sc.filter.Estimates()
			for i := range sc.replicas {
				sc.replicas[i].SetEstimates(fpr, fnr)
			}
		}
	}

	for i, x := range keys {
		client := i % clients
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
			calibrated := policy == string(indicators.FNALearned)
			rated := policy == string(indicators.FNARate)
			knowsNegatives := policy == negOracle
			homeAware := indicators.Policy(policy).HomeAware()
			negative = 0
			for j := range n {
				rep := &caches[j].replicas[client]
				// Only home-aware policies ask whether j is a home of x
				// (a ranking per replica), as before indicate existed.
				homed := homeAware && isHome(home, x, j, c.Replicas)
				var own map[uint64]struct{}
				if caches[j].ownFills != nil {
					own = caches[j].ownFills[client]
				}
				ownFill := false
				if own != nil && trust {
					_, ownFill = own[x]
				}
				ind[j] = indicate(rep, key, x, own, homed)
				var e indicators.Exclusion
				derivedNu[j] = -1 // not a home: no calibration
				switch {
				case calibrated && homed:
					e, derivedNu[j] = rep.LearnedHomeExclusion()
				case rated && homed:
					e, derivedNu[j] = rep.RateHomeExclusion()
				case homeAware && homed:
					e = rep.HomeExclusion()
				case homeAware:
					// Not a home: only a false positive could point here.
					e = indicators.Exclusion{Pi: 1, Nu: 1}
				default:
					e = rep.Exclusion()
					if learned {
						e = rep.LearnedExclusion()
					}
				}
				rho := e.Pi
				if ownFill {
					rho = 0
				}
				if !ind[j] {
					negative |= 1 << uint(j)
					rho = e.Nu
					switch {
					case policy == string(indicators.FNO):
						rho = 1
					case knowsNegatives && truth[j]:
						rho = 0
					case knowsNegatives:
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
			if calibrated || rated {
				mask = indicators.SelectNoWorse(cands[:n], c.MissPenalty, negative)
			} else {
				mask = indicators.Select(cands[:n], c.MissPenalty)
			}
			if rated {
				// Explore: a negatively indicated home left out is asked
				// now and then, so that its rate is learnt again where it
				// stopped paying; one at most per request, as the cluster
				// does (indicators.ExploreHome).
				var left uint64
				for j := range n {
					if negative&(1<<uint(j)) != 0 && derivedNu[j] >= 0 {
						left |= 1 << uint(j)
					}
				}
				mask |= indicators.ExploreHome(left&^mask, func(j int) float64 { return c.Costs[j] }, c.MissPenalty, rng)
			}
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
					caches[j].replicas[client].ObserveNegativeProbe(!truth[j])
					if derivedNu[j] >= 0 {
						caches[j].replicas[client].ObserveHomeNegativeProbe(derivedNu[j], truth[j])
					}
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
			if c.Faithful {
				// The answer carries the cache's current estimates.
				fpr, fnr := caches[j].filter.Estimates()
				caches[j].replicas[client].SetEstimates(fpr, fnr)
			}
		}
		if hit {
			hits++
			continue
		}
		cost += c.MissPenalty
		for r := range c.Replicas {
			insert(home(x, r), x, client)
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

func isHome(home func(x uint64, r int) int, x uint64, j, replicas int) bool {
	for r := range replicas {
		if home(x, r) == j {
			return true
		}
	}
	return false
}
