package indicators

import (
	"math"
	"math/bits"
	"sync"
)

// Exclusion holds the exclusion probabilities of one peer's indicator.
type Exclusion struct {
	H   float64 // estimated hit ratio h_j
	Pi  float64 // π_j = Pr(x ∉ S_j | positive indication)
	Nu  float64 // ν_j = Pr(x ∉ S_j | negative indication)
	Q   float64 // positive indication ratio q_j
	FPR float64
	FNR float64
}

// Exclusions derives h, π and ν from the positive-indication ratio q and
// the indicator's false-positive and false-negative ratios, as in the paper:
//
//	h = clip((q − fpr) / (1 − fpr − fnr), 0, 1)
//	π = fpr (1 − h) / q                 (if q = 0: 0 when fpr = 0, else 1)
//	ν = (1 − fpr)(1 − h) / (1 − q)      (1 if fnr = 0 or h = 1)
//
// Results are clipped to [0, 1]; a system with fpr + fnr ≥ 1 is not
// sufficiently accurate and gets π = ν = 1 (its indications mean nothing).
//
// ν = 1 when h clips to 1 is the authors' rule (their simulator does so):
// h = 1 says the estimators have broken down (typically the fnr estimate
// has run past 1 − q), and the formula's ν = 0 would then treat every
// negative indication as a certain hit, so FNA would ask the cheapest
// negatively indicated cache alone and skip the caches that say yes.
func Exclusions(q, fpr, fnr float64) Exclusion {
	e := exclusions(q, fpr, fnr)
	if e.H >= 1 {
		e.Nu = 1
	}
	return e
}

// HomeExclusions is Exclusions without the h = 1 rule, for q measured over
// the keys homed at the cache (fna-home). There h = 1 is a real estimate, not
// a breakdown: a home that has never had to evict holds every key sent to
// it, and a negative indication there is a stale filter, not a miss
// (measured in docs/indicators.md: the rule costs fna-home up to 4 %).
func HomeExclusions(q, fpr, fnr float64) Exclusion { return exclusions(q, fpr, fnr) }

func exclusions(q, fpr, fnr float64) Exclusion {
	e := Exclusion{Q: q, FPR: fpr, FNR: fnr, Pi: 1, Nu: 1}
	den := 1 - fpr - fnr
	if den <= 0 || math.IsNaN(q) {
		return e
	}
	e.H = clip01((q - fpr) / den)
	switch {
	case q > 0:
		e.Pi = clip01(fpr * (1 - e.H) / q)
	case fpr == 0:
		// 0/0: no positive counted yet, from a filter that reports no
		// false positives. The formula's limit is 0 (a positive is a
		// hit), not the 1 of an indicator whose positives mean nothing.
		e.Pi = 0
	}
	if fnr > 0 && q < 1 {
		e.Nu = clip01((1 - fpr) * (1 - e.H) / (1 - q))
	}
	return e
}

func clip01(x float64) float64 {
	switch {
	case x < 0, math.IsNaN(x):
		return 0
	case x > 1:
		return 1
	}
	return x
}

// QWindow and QWeight are the paper's estimator settings: the share of
// positive indications is counted over windows of 100 requests and folded
// into an exponential moving average with weight 0.25.
const (
	QWindow = 100
	QWeight = 0.25
)

// QEstimator estimates q_j, the ratio of positive indications, online.
type QEstimator struct {
	q         float64
	positives int
	n         int
	primed    bool
}

// Observe records one indication.
func (e *QEstimator) Observe(positive bool) {
	if positive {
		e.positives++
	}
	e.n++
	if e.n < QWindow {
		return
	}
	ratio := float64(e.positives) / float64(e.n)
	if !e.primed || e.q == 0 {
		// The first window, or the first with a positive after windows
		// without any (Q then read this window's share as it went: the
		// average starts from it rather than dropping to a quarter of it).
		e.q, e.primed = ratio, true
	} else {
		e.q = (1-QWeight)*e.q + QWeight*ratio
	}
	e.positives, e.n = 0, 0
}

// Q returns the current estimate: the running share of the window under
// way until a window with a positive indication has ended. Until then the
// average is exactly 0 (every window so far was negative: the peer held
// nothing yet), and π = fpr(1 − h)/q would price the first positives at 1,
// never asked, for a whole window more (measured live on cold nodes:
// docs/cluster.md, "One node's peers learn together").
func (e *QEstimator) Q() float64 {
	if !e.primed || (e.q == 0 && e.positives > 0) {
		if e.n == 0 {
			return 0
		}
		return float64(e.positives) / float64(e.n)
	}
	return e.q
}

// NuHistory learns ν_j from outcomes: of the negatively indicated probes
// sent to a peer, how many missed. It is the fna-hist variant's estimate
// and needs MinSamples outcomes before it is trusted.
type NuHistory struct {
	nu      float64
	samples int
}

// NuHistoryWeight is the EMA weight of one outcome; MinSamples is how many
// outcomes are needed before the learned ν replaces the derived one.
const (
	NuHistoryWeight = 0.02
	MinSamples      = 20
)

// Observe records whether a negatively indicated probe missed.
func (h *NuHistory) Observe(missed bool) {
	x := 0.0
	if missed {
		x = 1
	}
	if h.samples == 0 {
		h.nu = x
	} else {
		h.nu = (1-NuHistoryWeight)*h.nu + NuHistoryWeight*x
	}
	h.samples++
}

// Nu returns the learned ν and whether it has enough samples.
func (h *NuHistory) Nu() (float64, bool) { return h.nu, h.samples >= MinSamples }

// NuCalibration corrects a derived ν with what negative probes realised
// (the fna-learned policy). Outcomes are kept by the hit chance the
// derived ν gave (1 − ν), in bins, and each bin's realised hit rate
// replaces the derived one, shrunk towards a prior while the bin has few
// outcomes:
//
//	1 − ν' = (hits_b + a·p_b) / (n_b + a),   p_b = κ·p̄_b,   a = A / p_b
//
// p̄_b is the mean predicted hit chance of the bin's probes (the derived
// chance before any), κ = (hits + A)/(predicted + A) the ratio of realised
// to predicted hits over every bin, and A (CalibrationPrior) the prior's
// worth in expected hits:
//   - bins, not one correction factor, because the estimators err by
//     different amounts at different staleness (measured on Scarab: the
//     paper's estimate predicted 4 % to 86 % by bin where 10–24 % came);
//   - the prior borrows κ from the other bins, so that a peer whose
//     negatives miss is not explored afresh in each bin (in a 30-s live run
//     each bin's exploration cost the cluster more than fno; see
//     docs/indicators.md);
//   - a prior worth A expected hits rather than A probes, because at a
//     predicted 4 % a few misses in a row are what the derived ν expects,
//     not evidence against it.
//
// Counts decay with every outcome, so that the correction follows a
// changing workload, and slowly with every request (Age), so that a peer
// whose negatives stopped paying is tried again after a while.
type NuCalibration struct {
	n, hits, predicted    [calibrationBins]float64
	allHits, allPredicted float64 // over every bin: the peer's overall κ
}

// Calibration settings: A, the prior's weight in expected hits; the share
// of the counts kept per outcome (a memory of about 500 probes); the
// memory in requests of Age; and the upper edges of the bins of predicted hit chance. A was chosen on the
// tuning traces (docs/indicators.md); the bins were fixed before any run.
const (
	CalibrationPrior  = 5.0
	CalibrationKeep   = 0.998
	CalibrationMemory = 20000 // requests: Age's time constant
	calibrationBins   = 9
)

var calibrationEdges = [calibrationBins]float64{0.01, 0.02, 0.05, 0.1, 0.2, 0.35, 0.5, 0.7, 1}

func calibrationBin(p float64) int {
	for i, e := range calibrationEdges {
		if p <= e {
			return i
		}
	}
	return calibrationBins - 1
}

// Observe records one probe sent despite a negative indication: the hit
// chance its derived ν gave (1 − ν) and whether it hit.
func (c *NuCalibration) Observe(predictedHit float64, hit bool) {
	p := clip01(predictedHit)
	b := calibrationBin(p)
	c.n[b] = c.n[b]*CalibrationKeep + 1
	c.predicted[b] = c.predicted[b]*CalibrationKeep + p
	c.hits[b] *= CalibrationKeep
	c.allHits *= CalibrationKeep
	c.allPredicted = c.allPredicted*CalibrationKeep + p
	if hit {
		c.hits[b]++
		c.allHits++
	}
}

// Nu returns ν corrected by the outcomes so far, with no pool (a prior
// κ of 1).
func (c *NuCalibration) Nu(derived float64) float64 { return c.NuWith(derived, 1) }

// NuWith is Nu whose κ starts from pooled (a CalibrationPool's κ: what the
// client's other peers' negatives showed) instead of 1. A derived ν of 1 is
// kept: it is not a prediction but a certainty (fnr = 0 just after an
// advertisement, q = 1, or indications that mean nothing), and no bin's
// outcomes speak for it.
func (c *NuCalibration) NuWith(derived, pooled float64) float64 {
	if derived >= 1 || math.IsNaN(derived) {
		return 1
	}
	p := clip01(1 - derived)
	b := calibrationBin(p)
	prior := p
	if c.n[b] > 0 {
		prior = c.predicted[b] / c.n[b]
	}
	// A bin with few outcomes borrows what the others learnt: its prior is
	// the derived chance scaled by the peer's overall κ (itself shrunk to
	// the pool's κ by the prior), so that a peer whose negatives miss in
	// one bin is not explored afresh in each.
	prior = clip01(prior * c.KappaWith(pooled))
	// The prior is worth CalibrationPrior expected hits, not probes: at a
	// predicted chance of 4 % a few misses in a row are what the derived ν
	// expects, not evidence against it (a bin that learnt too early from
	// them would never be probed again).
	weight := CalibrationPrior / max(prior, 0.01)
	// The bin's rate, not the derived value moved by the bin's error: where
	// the derived ν carries no information (realised rates flat across
	// bins) an offset would move the estimate by noise.
	hit := (c.hits[b] + weight*prior) / (c.n[b] + weight)
	return clip01(1 - hit)
}

// Age forgets a little of what was learnt, once per request the peer's
// indication was read for: with no probes, κ and the bins drift back to
// the derived ν over about CalibrationMemory requests, so that a peer
// whose negatives stopped paying is tried again when they may pay once
// more (without it a collapsed κ stayed collapsed until the peer
// restarted).
func (c *NuCalibration) Age() {
	const keep = 1 - 1.0/CalibrationMemory
	c.allHits *= keep
	c.allPredicted *= keep
	for b := range c.n {
		c.n[b] *= keep
		c.hits[b] *= keep
		c.predicted[b] *= keep
	}
}

// NegativeRate is the fna-rate policy's estimate of how often a peer's
// negative indications for the keys homed at it are wrong: the hit rate
// its negative probes realised, with the derived chance (1 − ν) as a prior
// worth NegativeRatePrior probes.
//
// Why a rate and not fna-learned's correction of the derived ν: where
// requests come back soon after a miss (a moving popularity, a crowd, a
// trace with temporal locality) the keys asked are the keys inserted
// since the last advertisement far more often than fnr, an average over
// every held key, says; the derived chance is then not just off but
// ordered the wrong way. Measured on the synthetic drift trace (paper
// setting, a home's negatives binned by derived chance): negatives priced
// at most 10 % hit 13–29 % of the time, negatives priced 35–100 % hit
// 4–5 %, and the negatives right after an advertisement, which the
// derived ν calls certain misses (fnr = 0), hit 17.6 % (docs/indicators.md). A
// correction by bins of the derived chance cannot learn that ordering
// from the few probes each bin gets; one rate per home can.
//
// A rate learnt from the probes it chose would stay where it last
// stopped paying (no probes, no outcomes), so the selection also explores
// (ExploreChance) and the counts fade with every request (Age).
//
// The prior's weight fades with the outcomes (a pseudo-count kept like
// them): a prior that stayed worth ten probes held ν at or below
// 1 − 10/(10 + 500) ≈ 0.98 for a home whose derived ν was 0, however many
// of its negatives missed (the memory keeps about 500 outcomes), and at a
// miss penalty 50–100 times the access cost that kept probes going that
// never hit (the paper setting with the client's own fills: 0.15 probes
// per request, all misses, 1.0085 × fno on web07).
type NegativeRate struct {
	hits, n float64
	// worn is the share of the prior's weight the outcomes wore away,
	// given back as they fade: the zero value is the whole prior.
	worn float64
}

// Settings of NegativeRate, fixed before any run: the prior is worth ten
// probes (enough to start from the derived chance, few enough that the
// first outcomes overrule it); the memory per outcome and per request are
// fna-learned's (CalibrationKeep, CalibrationMemory); the exploration
// chance is 2 % of the negatives the selection left out.
const (
	NegativeRatePrior   = 10.0
	NegativeRateExplore = 0.02
)

// Observe records whether a probe sent despite a negative indication for
// a key homed at the peer hit.
func (r *NegativeRate) Observe(hit bool) {
	r.n = r.n*CalibrationKeep + 1
	r.hits *= CalibrationKeep
	r.worn = 1 - (1-r.worn)*CalibrationKeep
	if hit {
		r.hits++
	}
}

// Age forgets a little, once per request for a key homed at the peer:
// the outcomes fade and the prior gets back the weight they wore away, so
// a home not probed for a while is priced at its prior again. The price:
// a home whose prior says "hit" and whose negatives never do is still
// probed on about NegativeRatePrior·M/(CalibrationMemory·c) of its
// requests, M/2000 of cost per request (TestNegativeRateProbeFloor);
// exploration (ExploreChance) adds its own c·0.02·(1 − 2c/M), the larger
// of the two below M/c ≈ 50.
func (r *NegativeRate) Age() {
	const keep = 1 - 1.0/CalibrationMemory
	r.hits *= keep
	r.n *= keep
	r.worn *= keep
}

// Nu returns ν priced by the realised rate, the derived ν its prior. A
// derived ν of 1 (or NaN) is a prior hit chance of 0, not a certainty:
// outcomes overrule it like any other prior.
func (r *NegativeRate) Nu(derived float64) float64 { return r.NuWith(derived, 1) }

// NuWith is Nu whose prior is the derived chance scaled by pooled (a
// CalibrationPool's κ: how the group's other peers' negatives realised
// against their derived chances), as fna-learned's prior is. Why: live, a
// home with no outcomes of its own was priced by its derived chance alone,
// 40–100 % for the other region's homes where 5–6 % came, so each
// (ingress, home) pair spent its first probes waiting for misses before
// the climb (today's setting: 0.015 waited-for negative probes per
// request, a miss p99 of 85 ms against fno's 67; docs/cluster.md).
func (r *NegativeRate) NuWith(derived, pooled float64) float64 {
	prior := 0.0
	if !math.IsNaN(derived) {
		prior = clip01(1 - derived)
	}
	if pooled >= 0 && !math.IsInf(pooled, 0) { // NaN fails too: the unscaled prior
		prior = clip01(prior * pooled)
	}
	w := NegativeRatePrior * (1 - r.worn)
	return clip01(1 - (r.hits+w*prior)/(r.n+w))
}

// Rate returns the realised hit rate and its (faded) number of outcomes;
// the rate is 0 while fewer than one outcome's worth is left (a rate of
// what has faded away would read as a measurement).
func (r *NegativeRate) Rate() (rate, outcomes float64) {
	if r.n < 1 {
		return 0, r.n
	}
	return r.hits / r.n, r.n
}

// ExploreChance is how often fna-rate also probes a negatively indicated
// home its selection left out, at access cost c against miss penalty m:
// NegativeRateExplore, tapering to 0 at c = m/2. A probe can pay only if
// the rate exceeds c/m, and negatives that hit half the time or more are
// not to be expected, so exploring a home that costs half the miss
// penalty or more would only cost.
func ExploreChance(c, m float64) float64 {
	if !(m > 0) || !(c >= 0) {
		return 0
	}
	x := 1 - 2*c/m
	if !(x > 0) { // NaN too (c and m both infinite)
		return 0
	}
	return NegativeRateExplore * x
}

// Draws is the randomness ExploreHome takes its draws from: a *rand.Rand
// (the simulator's, seeded) or math/rand/v2's top-level functions.
type Draws interface {
	IntN(n int) int
	Float64() float64
}

// ExploreHome returns the one negatively indicated home fna-rate also
// asks beyond its selection, as a one-bit mask, or 0: one of left (the
// candidates eligible, as a mask) picked at random, then asked with
// ExploreChance(cost(i), m). One at most per request: a chance per home
// would explore more, and cost more, the more homes a key has. With one
// eligible home no draw picks it, so the draws a seeded simulation makes
// do not depend on how the pick is made.
func ExploreHome(left uint64, cost func(i int) float64, m float64, rng Draws) uint64 {
	n := bits.OnesCount64(left)
	if n == 0 {
		return 0
	}
	k := 0
	if n > 1 {
		k = rng.IntN(n)
	}
	for ; k > 0; k-- {
		left &= left - 1
	}
	i := bits.TrailingZeros64(left)
	if rng.Float64() < ExploreChance(cost(i), m) {
		return 1 << uint(i)
	}
	return 0
}

// Kappa returns the ratio of realised to predicted negative hits over
// every bin (1 before any outcome): how far the derived ν is off.
func (c *NuCalibration) Kappa() float64 { return c.KappaWith(1) }

// KappaWith is Kappa shrunk towards pooled rather than 1.
func (c *NuCalibration) KappaWith(pooled float64) float64 {
	return (c.allHits + CalibrationPrior*pooled) / (c.allPredicted + CalibrationPrior)
}

// CalibrationPool pools the negative-probe outcomes of a group of one
// client's replicas (a node's peers of one region), so that a peer with
// few outcomes of its own starts from what the others showed rather than
// from the derived ν: the same estimator error (a stale filter, a clipped
// h) tends to hit every peer of a group at once, and learning it afresh
// per peer cost each peer its own round of exploratory probes that missed
// (measured live: docs/cluster.md, "One node's peers learn together"). A
// peer's own outcomes outweigh the pool once they are worth
// CalibrationPrior expected hits.
//
// The pool keeps each member's share (its κ counts, decayed as the member
// decays them) and gives a member the κ of the others only: counting a
// peer's own outcomes in its prior too would count them twice, and a peer
// alone in its group would lose the prior's guard. A replica replaced at
// its peer's restart leaves, taking the old process's outcomes with it.
// Safe for concurrent use; a nil pool is a κ of 1.
type CalibrationPool struct {
	mu     sync.Mutex
	shares map[*Replica]poolShare
	total  poolShare // the sum of the shares, kept as they change: a member's κ is total − its share, O(1) per read
}

type poolShare struct{ hits, predicted float64 }

// set records a member's current counts (nil pool: nothing).
func (p *CalibrationPool) set(r *Replica, hits, predicted float64) {
	if p == nil {
		return
	}
	p.mu.Lock()
	if p.shares == nil {
		p.shares = map[*Replica]poolShare{}
	}
	old := p.shares[r]
	p.shares[r] = poolShare{hits, predicted}
	p.total.hits += hits - old.hits
	p.total.predicted += predicted - old.predicted
	p.mu.Unlock()
}

// leave removes a member's share.
func (p *CalibrationPool) leave(r *Replica) {
	if p == nil {
		return
	}
	p.mu.Lock()
	if old, ok := p.shares[r]; ok {
		delete(p.shares, r)
		p.total.hits -= old.hits
		p.total.predicted -= old.predicted
		if len(p.shares) == 0 {
			p.total = poolShare{} // no rounding left behind
		}
	}
	p.mu.Unlock()
}

// kappaExcept is the κ of every member but r, shrunk towards 1 by the
// prior (1 for a nil pool or no other member).
func (p *CalibrationPool) kappaExcept(r *Replica) float64 {
	if p == nil {
		return 1
	}
	p.mu.Lock()
	own := p.shares[r]
	hits := max(p.total.hits-own.hits, 0)
	predicted := max(p.total.predicted-own.predicted, 0)
	p.mu.Unlock()
	return (hits + CalibrationPrior) / (predicted + CalibrationPrior)
}

// Kappa is the pooled ratio of realised to predicted negative hits over
// every member, shrunk towards 1 by the prior (1 for a nil pool).
func (p *CalibrationPool) Kappa() float64 { return p.kappaExcept(nil) }
