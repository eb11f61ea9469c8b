package load

import (
	"math"
	"math/rand/v2"
	"sort"
)

// ZipfSampler draws ranks 0…n−1 with P(k) ∝ 1/(k+1)^s for any s > 0 (the
// standard library's Zipf needs s > 1; web traces often have s < 1).
type ZipfSampler struct{ cdf []float64 }

// NewZipf builds the sampler's table.
func NewZipf(s float64, n int) *ZipfSampler {
	cdf := make([]float64, n)
	sum := 0.0
	for k := range n {
		sum += 1 / math.Pow(float64(k+1), s)
		cdf[k] = sum
	}
	for k := range cdf {
		cdf[k] /= sum
	}
	return &ZipfSampler{cdf: cdf}
}

// Sample draws one rank.
func (z *ZipfSampler) Sample(r *rand.Rand) int {
	u := r.Float64()
	return min(sort.SearchFloat64s(z.cdf, u), len(z.cdf)-1)
}
