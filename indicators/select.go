// Package indicators owns stale Bloom-filter indicators and the choice of
// which peers to ask: the cache-side filter with periodic advertisement and
// its own fpr/fnr estimates, a compact epoch-numbered wire encoding (full or
// delta), the client-side replica with the q/h/π/ν estimators, and the
// false-negative-oblivious (FNO) and false-negative-aware (FNA: HoCS, PGM)
// selection policies of Cohen, Einziger and Scalosub's "False Negative
// Awareness in Indicator-based Caching Systems".
package indicators

import (
	"fmt"
	"math"
	"math/bits"
	"slices"
)

// Policy names a cache-selection policy.
type Policy string

// The policies.
const (
	// FNO is the classic false-negative-oblivious policy: ν ≡ 1, so a
	// negatively indicated cache is never asked.
	FNO Policy = "fno"
	// FNA is false-negative aware: HoCS when all costs are equal, PGM otherwise.
	FNA Policy = "fna"
	// FNAHist is FNA with ν learned per peer from the outcomes of negative
	// probes instead of derived from the fpr/fnr/q estimates.
	FNAHist Policy = "fna-hist"
	// FNAHome is FNA with the estimators conditioned on routing: the client
	// knows each key's home cache(s) from the ring, keeps q (and so h, π, ν)
	// separately for requests homed at each cache, and treats a cache that is
	// not a key's home as holding it only through its indication.
	FNAHome Policy = "fna-home"
	// FNALearned is ours: fna-home whose ν is corrected by the outcomes of
	// its negative probes (NuCalibration), with a selection that never
	// prices worse than fno's under its own estimates (SelectNoWorse).
	FNALearned Policy = "fna-learned"
	// FNARate is ours too: fna-home whose ν for a home is the hit rate its
	// negative probes realised (NegativeRate), with the derived ν as a
	// prior, SelectNoWorse, and a little exploration (ExploreChance).
	FNARate Policy = "fna-rate"
)

// HomeAware reports whether a policy conditions its estimates on the key's
// home (the client must know each key's homes).
func (p Policy) HomeAware() bool { return p == FNAHome || p == FNALearned || p == FNARate }

// ParsePolicy validates a policy name.
func ParsePolicy(s string) (Policy, error) {
	switch p := Policy(s); p {
	case FNO, FNA, FNAHist, FNAHome, FNALearned, FNARate:
		return p, nil
	}
	return "", fmt.Errorf("indicators: policy %q, want fno, fna, fna-hist, fna-home, fna-learned or fna-rate", s)
}

// MaxCandidates bounds a selection. Solutions are bit masks.
const MaxCandidates = 64

// Candidate is one cache that could be asked for an item.
type Candidate struct {
	Cost float64 // access cost c_j, normalised so the cheapest is 1
	Rho  float64 // exclusion probability ρ_j: π_j if indicated, ν_j if not
}

// Cost returns φ(D) = Σ_{j∈D} c_j + M·Π_{j∈D} ρ_j for the candidates in mask.
func Cost(cands []Candidate, mask uint64, m float64) float64 {
	c, p := 0.0, 1.0
	for mask != 0 {
		j := bits.TrailingZeros64(mask)
		mask &= mask - 1
		c += cands[j].Cost
		p *= cands[j].Rho
	}
	return c + m*p
}

// Select returns the set of candidates to ask, as a bit mask over cands,
// minimising the expected cost with miss penalty m: HoCS_FNA when every cost
// is equal (optimal), PGM otherwise. For FNO, give negatively indicated
// candidates ρ = 1; they are then never chosen. It does not allocate.
func Select(cands []Candidate, m float64) uint64 {
	if len(cands) == 0 {
		return 0
	}
	if len(cands) > MaxCandidates {
		cands = cands[:MaxCandidates]
	}
	equal := true
	for _, c := range cands[1:] {
		if c.Cost != cands[0].Cost {
			equal = false
			break
		}
	}
	if equal {
		return HoCS(cands, m)
	}
	return PGM(cands, m)
}

// ExactUpTo is how many candidates SelectNoWorse solves exactly: 2^n
// subsets, 2.2 µs at 8 candidates (PGM takes 2.5 µs there with unequal
// costs), 10.7 µs at 10 (BenchmarkSelectNoWorse).
const ExactUpTo = 8

// SelectNoWorse is the selection of fna-learned: the optimal set under the
// estimates when there are at most ExactUpTo candidates, and otherwise
// whichever of Select's set and Select's set over the positively indicated
// candidates alone (fno's choice; negative is the mask of the negatively
// indicated ones) has the smaller expected cost φ. Select's PGM is within
// a factor 2 of optimal; with more candidates its approximation can price
// worse than fno's set priced by the same estimates, and this never does.
func SelectNoWorse(cands []Candidate, m float64, negative uint64) uint64 {
	if len(cands) > MaxCandidates {
		cands = cands[:MaxCandidates]
	}
	if len(cands) <= ExactUpTo {
		return BruteForce(cands, m)
	}
	a := Select(cands, m)
	var pos [MaxCandidates]Candidate
	copy(pos[:], cands)
	for j := range cands {
		if negative&(1<<uint(j)) != 0 {
			pos[j].Rho = 1
		}
	}
	b := Select(pos[:len(cands)], m)
	if Cost(cands, b, m) < Cost(cands, a, m) {
		return b
	}
	return a
}

// order returns candidate indices sorted by ρ ascending (ties by index),
// in a fixed array so that sorting does not allocate.
func order(cands []Candidate, idx *[MaxCandidates]int8) []int8 {
	o := idx[:len(cands)]
	for i := range o {
		o[i] = int8(i)
	}
	slices.SortFunc(o, func(a, b int8) int {
		ra, rb := cands[a].Rho, cands[b].Rho
		switch {
		case ra < rb:
			return -1
		case ra > rb:
			return 1
		}
		return int(a) - int(b)
	})
	return o
}

// HoCS is the paper's homogeneous cache selection: with equal costs c, sort
// by ρ ascending and keep adding the next candidate while
// M·Π(chosen ρ)·(1 − ρ_next) > c, i.e. while it lowers the expected cost.
// It is optimal when costs are equal.
func HoCS(cands []Candidate, m float64) uint64 {
	var idx [MaxCandidates]int8
	var mask uint64
	prod := 1.0
	for _, j := range order(cands, &idx) {
		c := cands[j]
		if m*prod*(1-c.Rho) <= c.Cost {
			break
		}
		mask |= 1 << uint(j)
		prod *= c.Rho
	}
	return mask
}

// pgmEntry is a partial solution kept in one cost bucket.
type pgmEntry struct {
	cost, prod float64
	mask       uint64
	ok         bool
}

// maxBuckets bounds ⌊log2 M⌋+2 for any M below 2^62.
const maxBuckets = 64

// PGM is the paper's approximation for unequal costs. Candidates are
// partitioned into classes by ⌊log2 c_j⌋ (costs ≥ 1); in each class the
// prefixes of the candidates sorted by ρ are the partial solutions. Classes
// are merged one by one, keeping per cost bucket ⌊log2 cost⌋+1 only the
// solution with the smallest Πρ and dropping any that cost more than M.
// The result is the kept solution with the smallest φ (the empty set, with
// φ = M, included). There are ⌊log2 M⌋+2 buckets.
func PGM(cands []Candidate, m float64) uint64 {
	nb := int(math.Floor(math.Log2(math.Max(m, 1)))) + 2
	nb = min(nb, maxBuckets)
	bucket := func(cost float64) int {
		if cost <= 0 {
			return 0
		}
		if cost < 1 {
			return 1
		}
		_, exp := math.Frexp(cost) // cost = f·2^exp, f in [0.5, 1): ⌊log2 cost⌋ = exp−1
		return min(exp, nb-1)
	}
	var acc [maxBuckets]pgmEntry
	acc[0] = pgmEntry{cost: 0, prod: 1, ok: true}

	var idx [MaxCandidates]int8
	sorted := order(cands, &idx)
	// Visit classes in increasing ⌊log2 c⌋; within a class, ρ order is kept.
	var done uint64
	for len(sorted) > 0 && bits.OnesCount64(done) < len(cands) {
		class := -1
		for _, j := range sorted {
			if done&(1<<uint(j)) == 0 {
				class = costClass(cands[j].Cost)
				break
			}
		}
		if class < 0 {
			break
		}
		// The class's prefix solutions, in their own buckets.
		var cls [maxBuckets]pgmEntry
		cls[0] = pgmEntry{cost: 0, prod: 1, ok: true}
		cost, prod := 0.0, 1.0
		var mask uint64
		for _, j := range sorted {
			if done&(1<<uint(j)) != 0 || costClass(cands[j].Cost) != class {
				continue
			}
			done |= 1 << uint(j)
			cost += cands[j].Cost
			prod *= cands[j].Rho
			mask |= 1 << uint(j)
			if cost > m {
				continue // the rest of the class only costs more
			}
			if b := bucket(cost); !cls[b].ok || prod < cls[b].prod {
				cls[b] = pgmEntry{cost, prod, mask, true}
			}
		}
		// Merge: every pair of an accumulated and a class solution.
		var merged [maxBuckets]pgmEntry
		for a := 0; a < nb; a++ {
			if !acc[a].ok {
				continue
			}
			for c := 0; c < nb; c++ {
				if !cls[c].ok {
					continue
				}
				cost := acc[a].cost + cls[c].cost
				if cost > m {
					continue
				}
				prod := acc[a].prod * cls[c].prod
				if b := bucket(cost); !merged[b].ok || prod < merged[b].prod {
					merged[b] = pgmEntry{cost, prod, acc[a].mask | cls[c].mask, true}
				}
			}
		}
		acc = merged
	}
	best, bestPhi := uint64(0), m
	for b := 0; b < nb; b++ {
		if e := acc[b]; e.ok {
			if phi := e.cost + m*e.prod; phi < bestPhi {
				best, bestPhi = e.mask, phi
			}
		}
	}
	return best
}

// costClass is ⌊log2 c⌋ for c ≥ 1.
func costClass(c float64) int {
	if c < 1 {
		return 0
	}
	return int(math.Floor(math.Log2(c)))
}

// BruteForce returns the optimal set by trying every subset (for tests and
// small simulations; n ≤ 20).
func BruteForce(cands []Candidate, m float64) uint64 {
	n := len(cands)
	best, bestPhi := uint64(0), m
	for mask := uint64(1); mask < 1<<uint(n); mask++ {
		if phi := Cost(cands, mask, m); phi < bestPhi {
			best, bestPhi = mask, phi
		}
	}
	return best
}
