// Package sketch is a count-min sketch of 4-bit counters with periodic
// halving: the frequency estimate TinyLFU admission uses (Einziger,
// Friedman and Manes, "TinyLFU: A Highly Efficient Cache Admission
// Policy", 2017). Hand-written because it is forty lines; the libraries
// that have one (Ristretto, Caffeine's port) bundle it inside a whole cache
// whose storage the disk tier cannot use.
package sketch

// Sketch estimates how often each 64-bit hash was added recently. Not safe
// for concurrent use.
type Sketch struct {
	rows    [4][]uint8
	mask    uint64
	adds    int
	resetAt int
}

// New returns a sketch sized for about n distinct items: counters are
// halved every 10·n additions, so that the estimate follows recent
// popularity (the paper's sample size W).
func New(n int) *Sketch {
	width := 64
	for width < n {
		width <<= 1
	}
	s := &Sketch{mask: uint64(width - 1), resetAt: 10 * max(n, 64)}
	for i := range s.rows {
		s.rows[i] = make([]uint8, width)
	}
	return s
}

// index is row i's counter for h: four independent positions from one
// 64-bit hash by re-mixing (splitmix64's finaliser).
func (s *Sketch) index(h uint64, i int) uint64 {
	h += uint64(i+1) * 0x9e3779b97f4a7c15
	h = (h ^ h>>30) * 0xbf58476d1ce4e5b9
	h = (h ^ h>>27) * 0x94d049bb133111eb
	return (h ^ h>>31) & s.mask
}

// Add counts one occurrence of h.
func (s *Sketch) Add(h uint64) {
	for i := range s.rows {
		if c := &s.rows[i][s.index(h, i)]; *c < 15 {
			*c++
		}
	}
	if s.adds++; s.adds >= s.resetAt {
		s.adds = 0
		for i := range s.rows {
			for j := range s.rows[i] {
				s.rows[i][j] >>= 1
			}
		}
	}
}

// Estimate returns h's estimated recent count (never below the truth,
// up to 15, before halvings).
func (s *Sketch) Estimate(h uint64) int {
	m := uint8(15)
	for i := range s.rows {
		m = min(m, s.rows[i][s.index(h, i)])
	}
	return int(m)
}
