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
func qUpper(b int) float64 {
	if b == 0 {
		return 0
	}
	return qMin * math.Pow(qRatio, float64(b))
}

func (q *quantileWindow) add(x float64) {
	if q.full {
		q.counts[q.ring[q.next]]--
	}
	b := qBucket(x)
	q.ring[q.next] = b
	q.counts[b]++
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
	var sum int32
	for b := range qBuckets {
		sum += q.counts[b]
		if sum >= target {
			return qUpper(b)
		}
	}
	return qUpper(qBuckets - 1)
}
