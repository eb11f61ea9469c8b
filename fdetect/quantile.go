package fdetect

import "math"

// quantileWindow keeps the last W samples as indexes into a fixed set of
// log-spaced buckets (5 % wide, 50 µs to about 10 s), so that adding a
// sample and asking for a quantile cost O(buckets) with no allocation and
// no sorting. Samples at or below zero share bucket 0.
type quantileWindow struct {
	ring   []uint8
	next   int
	full   bool
	counts [qBuckets]int32
	top    int // highest non-empty bucket (0 when empty): tail reads start here
}

const (
	qBuckets = 256
	qMin     = 50e3 // ns: the smallest resolved margin, 50 µs
	qRatio   = 1.05 // each bucket 5 % wider than the previous
)

var qLogRatio = math.Log(qRatio)

func newQuantileWindow(w int) *quantileWindow { return &quantileWindow{ring: make([]uint8, max(w, 1))} }

func qBucket(x float64) uint8 {
	if x <= 0 {
		return 0
	}
	b := 1 + int(math.Log(math.Max(x, qMin)/qMin)/qLogRatio)
	return uint8(min(b, qBuckets-1))
}

// qUpper is the upper edge of bucket b (0 for bucket 0).
func qUpper(b int) float64 { return qEdges[b] }

// qEdges are the buckets' upper edges, computed once: margins are read
// from them on every heartbeat.
var qEdges = func() (e [qBuckets]float64) {
	for b := 1; b < qBuckets; b++ {
		e[b] = qMin * math.Pow(qRatio, float64(b))
	}
	return e
}()

func (q *quantileWindow) add(x float64) {
	if q.full {
		q.counts[q.ring[q.next]]--
	}
	b := qBucket(x)
	q.ring[q.next] = b
	q.counts[b]++
	q.top = max(q.top, int(b))
	for q.top > 0 && q.counts[q.top] == 0 {
		q.top--
	}
	q.next++
	if q.next == len(q.ring) {
		q.next, q.full = 0, true
	}
}

func (q *quantileWindow) n() int {
	if q.full {
		return len(q.ring)
	}
	return q.next
}

// quantile returns an upper bound of the p-quantile (the upper edge of the
// bucket holding it), so at least a share p of the window is at or below it.
func (q *quantileWindow) quantile(p float64) float64 {
	n := q.n()
	if n == 0 {
		return 0
	}
	target := int32(math.Ceil(p * float64(n)))
	// Walk down from the highest non-empty bucket: margins are high
	// quantiles, so this stops after a few buckets. cum counts the samples
	// in buckets up to b.
	cum, b := int32(n), q.top
	for b > 0 && cum-q.counts[b] >= target {
		cum -= q.counts[b]
		b--
	}
	return qUpper(b)
}

// qMid is a representative value of bucket b (its geometric middle; 0 for
// bucket 0, which holds samples at or below zero).
func qMid(b int) float64 {
	if b == 0 {
		return 0
	}
	return qUpper(b) / math.Sqrt(qRatio)
}

// tailQuantile estimates a high p-quantile from an exponential fit of the
// tail above the u-quantile (peaks over threshold): P(x > m) ≈
// (k/n)·exp(−(m − t)/β) for m ≥ t, with t the u-quantile, k the samples
// above it and β their mean excess. Far in the tail a window holds only a
// handful of samples and the plain quantile jumps from one to the next; the
// fit uses the hundreds above t, so the margin it gives moves smoothly.
func (q *quantileWindow) tailQuantile(p, u float64) float64 {
	n := float64(q.n())
	if p <= u || n == 0 {
		return q.quantile(p)
	}
	t, k, beta := q.tailFit(u)
	if k == 0 || beta <= 0 {
		return t
	}
	return t + beta*math.Max(0, math.Log(k/n/(1-p)))
}

// tailFit returns the u-quantile t, the samples k above it and their mean
// excess β: the exponential tail P(x > m) ≈ (k/n)·exp(−(m − t)/β).
func (q *quantileWindow) tailFit(u float64) (t, k, beta float64) {
	t = q.quantile(u)
	var excess float64
	for b := q.top; b > 0 && qUpper(b-1) >= t; b-- {
		c := float64(q.counts[b])
		k += c
		excess += c * (qMid(b) - t)
	}
	if k > 0 {
		beta = excess / k
	}
	return t, k, beta
}
