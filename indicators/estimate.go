package indicators

import "math"

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
//	π = fpr (1 − h) / q                 (1 if q = 0)
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
	if q > 0 {
		e.Pi = clip01(fpr * (1 - e.H) / q)
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
	if !e.primed {
		e.q, e.primed = ratio, true
	} else {
		e.q = (1-QWeight)*e.q + QWeight*ratio
	}
	e.positives, e.n = 0, 0
}

// Q returns the current estimate (the running share before the first window ends).
func (e *QEstimator) Q() float64 {
	if !e.primed {
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
