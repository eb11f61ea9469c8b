package indicators

import (
	"sync"

	"github.com/bits-and-blooms/bloom/v3"
)

// Replica is the client side of one peer's indicator: the stale filter as
// last advertised, the peer's latest fpr/fnr estimates, and the client's own
// q estimate. Safe for concurrent use; a bad payload leaves it unchanged.
type Replica struct {
	mu       sync.RWMutex
	epoch    uint64
	filter   *bloom.BloomFilter
	fpr, fnr float64
	q        QEstimator
	qHome    QEstimator // q over requests for keys homed at this peer
	nuHist   NuHistory
	nuCal    NuCalibration    // fna-learned: outcomes of negative probes for keys homed here
	negRate  NegativeRate     // fna-rate: the same outcomes as one rate
	pool     *CalibrationPool // the pool nuCal borrows its prior κ from, and feeds (nil: none)
}

// SharePool makes the replica's fna-learned calibration start from, and
// feed, pool (one per group of a client's replicas), leaving the pool it
// shared before; nil leaves it (a replica being replaced).
func (r *Replica) SharePool(p *CalibrationPool) {
	r.mu.Lock()
	if r.pool != p {
		r.pool.leave(r)
		r.pool = p
		r.pool.set(r, r.nuCal.allHits, r.nuCal.allPredicted)
	}
	r.mu.Unlock()
}

// Apply decodes and applies an advertisement. A full payload replaces the
// replica; a delta applies only on top of the epoch it was made from. On
// any error the replica is unchanged; RejectReason(err) says why.
func (r *Replica) Apply(b []byte) error {
	p, err := Decode(b)
	if err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if p.Epoch <= r.epoch {
		return rejectPayload(ReasonStale, "epoch %d, replica holds %d", p.Epoch, r.epoch)
	}
	if !p.Delta {
		r.filter = bloom.FromWithM(p.Words, p.M, p.K)
	} else {
		if r.filter == nil || p.Base != r.epoch {
			return rejectPayload(ReasonBase, "delta from epoch %d, replica holds %d", p.Base, r.epoch)
		}
		if r.filter.Cap() != p.M || r.filter.K() != p.K {
			return rejectPayload(ReasonParams, "delta for m=%d k=%d, replica has m=%d k=%d", p.M, p.K, r.filter.Cap(), r.filter.K())
		}
		next := r.filter.Copy()
		bs := next.BitSet()
		p.EachFlip(func(pos uint64) { bs.Flip(uint(pos)) })
		r.filter = next
	}
	r.epoch = p.Epoch
	r.fpr, r.fnr = p.FPR, p.FNR
	return nil
}

// SetEstimates records the peer's latest (fpr, fnr), e.g. from a heartbeat.
func (r *Replica) SetEstimates(fpr, fnr float64) {
	if !validRatio(fpr) || !validRatio(fnr) {
		return
	}
	r.mu.Lock()
	r.fpr, r.fnr = fpr, fnr
	r.mu.Unlock()
}

// Test returns the indication for key: false if nothing was advertised yet.
func (r *Replica) Test(key []byte) bool {
	r.mu.RLock()
	f := r.filter
	r.mu.RUnlock()
	return f != nil && f.Test(key)
}

// Indicate returns the indication for key and counts it for the q estimate.
func (r *Replica) Indicate(key []byte) bool {
	ind := r.Test(key)
	r.Count(ind, false)
	return ind
}

// Count counts an indication already read with Test towards q, and
// towards the home-conditioned q when the key is homed at this peer.
// Before the first advertisement there is no indication to count: Test's
// "no" then says nothing of the peer, and counting it primed q at 0, which
// priced the first positive indications π = 1 (never asked) until a later
// window moved q (measured live: a sixth of the positives a cold
// fna-learned node saw in today's two-region setting, docs/cluster.md).
func (r *Replica) Count(positive, home bool) {
	r.mu.Lock()
	if r.filter != nil {
		r.q.Observe(positive)
		if home {
			r.qHome.Observe(positive)
		}
	}
	if home {
		r.negRate.Age()
		r.nuCal.Age()
		r.pool.set(r, r.nuCal.allHits, r.nuCal.allPredicted)
	}
	r.mu.Unlock()
}

// IndicateHome returns the indication for a key homed at this peer and
// counts it for the home-conditioned q estimate (fna-home).
func (r *Replica) IndicateHome(key []byte) bool {
	ind := r.Test(key)
	r.Count(ind, true)
	return ind
}

// HomeExclusion returns h, π, ν for keys homed at this peer: the same
// formulas with q measured over those keys only, so h is the peer's hit
// ratio for the keys it is responsible for.
func (r *Replica) HomeExclusion() Exclusion {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return HomeExclusions(r.qHome.Q(), r.fpr, r.fnr)
}

// LearnedHomeExclusion is HomeExclusion with ν corrected by the outcomes
// of earlier negative probes for keys homed here (fna-learned); derivedNu is
// the uncorrected ν, which ObserveHomeNegativeProbe wants back.
func (r *Replica) LearnedHomeExclusion() (e Exclusion, derivedNu float64) {
	return r.homeExclusionWith(r.nuCal.NuWith)
}

// RateHomeExclusion is HomeExclusion with ν priced by the hit rate of
// earlier negative probes for keys homed here (fna-rate), its prior the
// derived chance scaled by the pool's κ; derivedNu is the derived ν, which
// ObserveHomeNegativeProbe wants back.
func (r *Replica) RateHomeExclusion() (e Exclusion, derivedNu float64) {
	return r.homeExclusionWith(r.negRate.NuWith)
}

// homeExclusionWith is HomeExclusion with ν replaced by learned(derived ν,
// the pool's κ for this replica), read under the replica's lock.
func (r *Replica) homeExclusionWith(learned func(derived, pooled float64) float64) (e Exclusion, derivedNu float64) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	e = HomeExclusions(r.qHome.Q(), r.fpr, r.fnr)
	derivedNu = e.Nu
	e.Nu = learned(derivedNu, r.pool.kappaExcept(r))
	return e, derivedNu
}

// NegativeHitRate returns the hit rate of the negative probes for keys
// homed here and their (faded) number (fna-rate's estimate, kept with
// every home-aware policy).
func (r *Replica) NegativeHitRate() (rate, outcomes float64) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.negRate.Rate()
}

// ObserveHomeNegativeProbe records the outcome of a probe sent to this
// peer despite a negative indication for a key homed here, with the
// derived ν it was priced with (fna-learned and fna-rate: both learn from
// every such outcome, whichever priced it).
func (r *Replica) ObserveHomeNegativeProbe(derivedNu float64, hit bool) {
	r.mu.Lock()
	r.negRate.Observe(hit)
	r.nuCal.Observe(1-derivedNu, hit)
	r.pool.set(r, r.nuCal.allHits, r.nuCal.allPredicted)
	r.mu.Unlock()
}

// Calibration returns κ, the ratio of negative-probe hits to the hits the
// derived ν predicted (the pool's κ, or 1, before any outcome of its own).
func (r *Replica) Calibration() float64 {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.nuCal.KappaWith(r.pool.kappaExcept(r))
}

// ObserveNegativeProbe records whether a probe sent despite a negative
// indication missed (for fna-hist).
func (r *Replica) ObserveNegativeProbe(missed bool) {
	r.mu.Lock()
	r.nuHist.Observe(missed)
	r.mu.Unlock()
}

// Exclusion returns the current h, π, ν estimates from q and the
// advertised fpr and fnr.
func (r *Replica) Exclusion() Exclusion {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return Exclusions(r.q.Q(), r.fpr, r.fnr)
}

// LearnedExclusion is Exclusion with ν taken from the negative-probe
// history once it has enough samples (the fna-hist policy).
func (r *Replica) LearnedExclusion() Exclusion {
	r.mu.RLock()
	defer r.mu.RUnlock()
	e := Exclusions(r.q.Q(), r.fpr, r.fnr)
	if nu, ok := r.nuHist.Nu(); ok {
		e.Nu = nu
	}
	return e
}

// Epoch returns the epoch the replica holds (0 before the first advertisement).
func (r *Replica) Epoch() uint64 {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.epoch
}
