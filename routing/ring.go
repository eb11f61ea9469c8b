package routing

import (
	"fmt"
	"math"
	"math/bits"
	"slices"
	"strings"
)

// Member is one cache in a view.
type Member struct {
	ID     string
	Weight float64 // relative capacity; 1 is the default, 0 is treated as 1
}

// Ring is an immutable consistent-hash ring over one view. Build a new Ring
// for a new view; share a Ring between goroutines freely.
type Ring struct {
	ids    []string // member ids, sorted
	idHash []uint64 // hash of each id, for rendezvous ranking
	points []uint64 // sorted point positions
	owners []int32  // owners[i] is the member index of points[i]
	// index[s] is the position of the first point >= s<<shift: the paper's
	// segment table, so a lookup reads one entry and scans O(1) points.
	index []uint32
	shift uint
}

// DefaultVNodes is the number of points per unit of weight. 160 keeps the
// busiest node within 1.3× the mean for 10–1000 nodes (see the tests).
const DefaultVNodes = 160

// NewRing builds a ring with vnodes points per unit weight for each member.
// Duplicate ids are an error; an empty view gives an empty ring.
func NewRing(members []Member, vnodes int) (*Ring, error) {
	if vnodes < 1 {
		return nil, fmt.Errorf("routing: vnodes %d, want at least 1", vnodes)
	}
	ms := slices.Clone(members)
	slices.SortFunc(ms, func(a, b Member) int { return strings.Compare(a.ID, b.ID) })
	r := &Ring{}
	type pt struct {
		pos     uint64
		owner   int32
		replica int32
	}
	var pts []pt
	for i, m := range ms {
		if m.ID == "" {
			return nil, fmt.Errorf("routing: empty member id")
		}
		if i > 0 && ms[i-1].ID == m.ID {
			return nil, fmt.Errorf("routing: duplicate member %q", m.ID)
		}
		w := m.Weight
		if w == 0 {
			w = 1
		}
		if w < 0 || math.IsNaN(w) || math.IsInf(w, 0) {
			return nil, fmt.Errorf("routing: member %q has weight %v", m.ID, m.Weight)
		}
		n := max(1, int(math.Round(float64(vnodes)*w)))
		r.ids = append(r.ids, m.ID)
		r.idHash = append(r.idHash, KeyHash(m.ID))
		for rep := range n {
			pts = append(pts, pt{pointHash(m.ID, rep), int32(i), int32(rep)})
		}
	}
	// Sort by position; break collisions deterministically by (owner id,
	// replica) and keep only the first point at each position, so every
	// process resolves a collision the same way.
	slices.SortFunc(pts, func(a, b pt) int {
		switch {
		case a.pos != b.pos:
			if a.pos < b.pos {
				return -1
			}
			return 1
		case a.owner != b.owner:
			return int(a.owner - b.owner)
		default:
			return int(a.replica - b.replica)
		}
	})
	pts = slices.CompactFunc(pts, func(a, b pt) bool { return a.pos == b.pos })
	r.points = make([]uint64, len(pts))
	r.owners = make([]int32, len(pts))
	for i, p := range pts {
		r.points[i], r.owners[i] = p.pos, p.owner
	}
	r.buildIndex()
	return r, nil
}

func (r *Ring) buildIndex() {
	n := len(r.points)
	if n == 0 {
		return
	}
	b := bits.Len(uint(n - 1)) // 2^b >= n segments
	if b == 0 {
		b = 1
	}
	r.shift = uint(64 - b)
	r.index = make([]uint32, 1<<b)
	j := 0
	for s := range r.index {
		start := uint64(s) << r.shift
		for j < n && r.points[j] < start {
			j++
		}
		r.index[s] = uint32(j)
	}
}

// Len is the number of members.
func (r *Ring) Len() int { return len(r.ids) }

// Member returns the id of member i.
func (r *Ring) Member(i int) string { return r.ids[i] }

// Members returns the member ids, sorted.
func (r *Ring) Members() []string { return slices.Clone(r.ids) }

// IndexOf returns the member index of id, or -1.
func (r *Ring) IndexOf(id string) int {
	i, ok := slices.BinarySearch(r.ids, id)
	if !ok {
		return -1
	}
	return i
}

// Points is the number of points on the ring.
func (r *Ring) Points() int { return len(r.points) }

// Lookup returns the member owning position h: the owner of the first point
// at or after h, wrapping around. It returns -1 on an empty ring.
func (r *Ring) Lookup(h uint64) int {
	n := len(r.points)
	if n == 0 {
		return -1
	}
	i := int(r.index[h>>r.shift])
	for i < n && r.points[i] < h {
		i++
	}
	if i == n {
		i = 0
	}
	return int(r.owners[i])
}

// Owner returns the id of the member owning key.
func (r *Ring) Owner(key string) string {
	i := r.Lookup(KeyHash(key))
	if i < 0 {
		return ""
	}
	return r.ids[i]
}

// Arcs returns each member's exact share of the hash space.
func (r *Ring) Arcs() []float64 {
	share := make([]float64, len(r.ids))
	n := len(r.points)
	for i := range n {
		prev := r.points[(i+n-1)%n]
		arc := r.points[i] - prev // wraps correctly in uint64 arithmetic
		if n == 1 {
			arc = math.MaxUint64
		}
		share[r.owners[i]] += float64(arc) / math.MaxUint64
	}
	return share
}
