package fdetect

import "math"

// lossModel is ml's composite margin (MLConfig.LossModel): instead of one
// quantile over everything that made an arrival late, it keeps the causes
// apart, each with the memory it needs, and combines them into the chance
// that the next arrival comes after a margin m:
//
//		P(L > m) = (1 − p − o)·S(m) + p·Σ_{g≥1} (1 − ρ)·ρ^(g−1)·S(m − g·Δ) + o·S_out(m)
//
//	  - S is the survival of the delay errors (the predictor's errors on
//	    arrivals that followed no loss and no outage; ML's short window, so it
//	    follows delay regimes within minutes);
//	  - p, the chance that the next heartbeat is lost, depends on how long ago
//	    the last loss was (the regime): losses come in bursts, so right after
//	    one the next is far likelier to be lost than after a long clean run,
//	    and a margin that covers a loss only then costs little on average;
//	  - a run of losses, once begun, goes on with chance ρ (geometric run
//	    lengths: ρ ≈ p for i.i.d. loss, large in bursts), so rare long runs
//	    that no window has seen still get a probability;
//	  - o is the chance of an outage (a sender stall or a cut: the arrival came
//	    more than OutagePeriods later than its own sequence number says, or
//	    after more than lossRunMax losses in a row), and S_out the survival of
//	    how late such arrivals came.
//
// Every count decays at every arrival, over lossMemory arrivals, so
// evidence of a lossy spell fades in about half an hour at Δ = 100 ms
// whatever regime it was seen in, and a regime seen rarely (right after a
// loss, on a clean link) borrows from the link's overall rate through a
// prior worth lossPrior observations.
type lossModel struct {
	sinceLoss int // arrivals since the last loss or outage
	// Per regime: decayed observations, next gaps that began a loss run,
	// outages.
	obs, first, out [lossRegimes]float64
	runs, extra     float64 // decayed loss runs and their lengths beyond the first loss
	outLate         *quantileWindow
	// early holds the negated delay errors, so S(x) is known for x < 0 too
	// (ML's window puts every early arrival in one bucket): a run of g
	// losses is covered by m = g·Δ + e only for the errors e ≤ m − g·Δ,
	// which may be below zero.
	early       *quantileWindow
	suffix      [qBuckets + 1]int32 // scratch: samples in buckets ≥ b
	earlySuffix [qBuckets + 1]int32
	outSuffix   [qBuckets + 1]int32
	// cached margins per regime (0: not computed since the last event),
	// and arrivals until they are all recomputed: a margin costs about
	// 9 µs to solve, and between loss events only the slowly moving delay
	// errors change it.
	cached [lossRegimes]float64
	fresh  int
	// priced: the margin minimises m + λ·P(L > m) with λ = Δ/(1 − q),
	// instead of meeting P(L > m) ≤ 1 − q in every regime (see ML's
	// LossModel).
	priced bool
}

const (
	// lossRegimes: the arrival right after a loss, 1–9 arrivals after one,
	// and 10 or more (a burst of the traces' Gilbert–Elliott chain lasts
	// about 10 heartbeats).
	lossRegimes = 3
	// lossMemory is the decay of the loss counts, in observations: about
	// half an hour at Δ = 100 ms, since a link's loss rate changes slowly
	// and rare runs need long evidence.
	lossMemory = 20000
	// lossPrior is how many observations the link-wide rate is worth in a
	// regime's estimate, and priorLoss, priorLossWeight the rate a fresh
	// link starts from: a loss in a thousand heartbeats, worth 500.
	lossPrior       = 20
	priorLoss       = 1e-3
	priorLossWeight = 500
	// lossRunMax: a run of more lost heartbeats is an outage, not random
	// loss (as LossAware's cap).
	lossRunMax = LossMaxExtra
	// outageWindow is how many outage latenesses S_out is read from.
	outageWindow = 64
	// lossRefresh is how many arrivals a regime's margin is reused for
	// when no loss or outage happened: 6.4 s at Δ = 100 ms; the delay
	// errors' window holds 2000.
	lossRefresh = 64
)

func newLossModel(window int, priced bool) *lossModel {
	return &lossModel{outLate: newQuantileWindow(outageWindow), early: newQuantileWindow(window), priced: priced}
}

// addError records a delay error (ns) as ML's error window does.
func (l *lossModel) addError(e float64) { l.early.add(-e) }

func (l *lossModel) regime() int {
	switch {
	case l.sinceLoss == 0:
		return 0
	case l.sinceLoss < 10:
		return 1
	}
	return 2
}

// observe records the arrival that ended a gap of lost heartbeats (0: none),
// and whether it was an outage and then how late (ns) it came after the
// point in force without margin.
func (l *lossModel) observe(lost int, outage bool, lateness float64) {
	r := l.regime()
	keep := 1 - 1.0/lossMemory
	for i := range lossRegimes {
		l.obs[i] *= keep
		l.first[i] *= keep
		l.out[i] *= keep
	}
	l.runs *= keep
	l.extra *= keep
	l.obs[r]++
	if outage || lost > 0 {
		l.cached = [lossRegimes]float64{}
	}
	if l.fresh--; l.fresh <= 0 {
		l.cached, l.fresh = [lossRegimes]float64{}, lossRefresh
	}
	switch {
	case outage || lost > lossRunMax:
		l.out[r]++
		l.outLate.add(lateness)
		l.sinceLoss = 0
	case lost > 0:
		l.first[r]++
		l.runs++
		l.extra += float64(lost - 1)
		l.sinceLoss = 0
	default:
		l.sinceLoss++
	}
}

// rates returns p, o for the current regime and ρ.
func (l *lossModel) rates() (p, o, rho float64) {
	var obs, first, out float64
	for r := range lossRegimes {
		obs += l.obs[r]
		first += l.first[r]
		out += l.out[r]
	}
	pAll := (first + priorLoss*priorLossWeight) / (obs + priorLossWeight)
	oAll := (out + priorLoss*priorLossWeight/10) / (obs + priorLossWeight)
	r := l.regime()
	p = (l.first[r] + lossPrior*pAll) / (l.obs[r] + lossPrior)
	o = (l.out[r] + lossPrior*oAll) / (l.obs[r] + lossPrior)
	// Geometric run length: ρ = extra/(extra + runs), the MLE, with one
	// pseudo-run continued with chance pAll (i.i.d. loss at the overall
	// rate) as the prior.
	rho = (l.extra + pAll) / (l.extra + l.runs + 1)
	return p, o, rho
}

// priceMargin returns the m in [0, hi] that minimises m + λ·f(m): a
// mistake priced at λ of margin. f falls with m but need not be convex (a
// loss run adds a step a period on), so the minimum is found on a grid 10 %
// apart (every other bucket edge of the histogram) and refined between the
// best point's neighbours.
func priceMargin(f func(float64) float64, lambda, hi float64) float64 {
	cost := func(m float64) float64 { return m + lambda*f(m) }
	best, bestCost := 0.0, cost(0)
	prev, next := 0.0, qEdges[2]
	for b := 2; b < qBuckets && qEdges[b-2] < hi; b += 2 {
		if c := cost(qEdges[b]); c < bestCost {
			best, bestCost = qEdges[b], c
			prev, next = qEdges[b-2], qEdges[min(b+2, qBuckets-1)]
		}
	}
	// Golden-section search between the neighbours.
	const g = 0.6180339887498949
	a, z := prev, next
	for range 16 {
		x1, x2 := z-g*(z-a), a+g*(z-a)
		if cost(x1) <= cost(x2) {
			z = x2
		} else {
			a = x1
		}
	}
	if m := (a + z) / 2; cost(m) < bestCost {
		return m
	}
	return best
}

// margin returns the smallest m with P(L > m) ≤ 1 − q (ns), errs holding
// the delay errors and period Δ, reusing the regime's last solution until
// an event or lossRefresh arrivals make it stale.
func (l *lossModel) margin(errs *quantileWindow, q, period float64) float64 {
	r := l.regime()
	if l.cached[r] == 0 {
		l.cached[r] = math.Max(l.solve(errs, q, period), 1) // 1 ns: computed
	}
	return l.cached[r]
}

func (l *lossModel) solve(errs *quantileWindow, q, period float64) float64 {
	f, hi := l.lateChance(errs, 1-q, period)
	if f == nil {
		return 0
	}
	if l.priced {
		return priceMargin(f, period/(1-q), hi)
	}
	budget, lo := 1-q, 0.0
	if f(hi) > budget {
		return hi
	}
	for range 24 {
		mid := (lo + hi) / 2
		if f(mid) <= budget {
			hi = mid
		} else {
			lo = mid
		}
	}
	return hi
}

// lateChance returns m ↦ P(L > m) for the current regime (nil before any
// delay error) and a margin past which it no longer matters; budget only
// bounds how many loss runs are summed.
func (l *lossModel) lateChance(errs *quantileWindow, budget, period float64) (func(float64) float64, float64) {
	p, o, rho := l.rates()
	// Survival of the delay errors: the empirical share above x up to the
	// tailFrom quantile, an exponential fit of the tail past it (as
	// tailQuantile), so far quantiles move smoothly.
	n := float64(errs.n())
	if n == 0 {
		return nil, 0
	}
	var cum, cumEarly, cumOut int32
	for b := qBuckets - 1; b >= 0; b-- {
		cum += errs.counts[b]
		l.suffix[b] = cum
		cumEarly += l.early.counts[b]
		l.earlySuffix[b] = cumEarly
		cumOut += l.outLate.counts[b]
		l.outSuffix[b] = cumOut
	}
	nOut := float64(l.outLate.n())
	nEarly := float64(max(l.early.n(), 1))
	t, k, beta := errs.tailFit(tailFrom)
	// Both sides read to the conservative bucket edge (a sample in x's
	// bucket counts as above x), as quantile returns a bucket's upper edge.
	surv := func(x float64) float64 {
		switch {
		case x >= t:
			if beta <= 0 {
				return 0
			}
			return k / n * math.Exp(-(x-t)/beta)
		case x < 0:
			// P(e > x) = 1 − P(−e > −x): one minus the early errors
			// beyond −x's bucket.
			return 1 - float64(l.earlySuffix[min(int(qBucket(-x))+1, qBuckets)])/nEarly
		}
		// Bucket 0 holds the errors at or below zero: none is above x ≥ 0.
		return float64(l.suffix[max(int(qBucket(x)), 1)]) / n
	}
	// Loss runs long enough to matter: stop when their weight is a
	// thousandth of the budget.
	runs := 1
	for w := p; runs < lossRunMax && w*rho > budget*1e-3; runs++ {
		w *= rho
	}
	f := func(m float64) float64 {
		v := (1 - p - o) * surv(m)
		w := p * (1 - rho)
		for g := 1; g <= runs; g++ {
			v += w * surv(m-float64(g)*period)
			w *= rho
		}
		if o > 0 && nOut > 0 {
			// Outages later than m, to the conservative bucket edge as
			// the delay errors.
			v += o * float64(l.outSuffix[qBucket(m)]) / nOut
		}
		return v
	}
	return f, math.Max(float64(runs+1)*period+t+20*math.Max(beta, period/10), lateCap*period)
}
