package routing

import (
	"fmt"
	"math"
	"slices"
)

// Tree is the shape of every page's random tree: Size nodes in BFS rank
// order with Arity children each. Rank 1 is the root (the origin); the
// children of rank i are d(i−1)+2 … d(i−1)+d+1; the parent of i > 1 is
// ⌊(i−2)/d⌋+1; the leaves are ranks ⌊(Size−2)/d⌋+2 … Size.
type Tree struct {
	Size  int // nodes, the root included
	Arity int // d
}

// Validate checks the shape.
func (t Tree) Validate() error {
	if t.Size < 1 || t.Arity < 2 {
		return fmt.Errorf("routing: tree size %d arity %d: want size ≥ 1 and arity ≥ 2", t.Size, t.Arity)
	}
	return nil
}

// Parent returns the parent rank of i > 1.
func (t Tree) Parent(i int) int { return (i-2)/t.Arity + 1 }

// Children returns the first and last child rank of i; first > last when i
// is a leaf.
func (t Tree) Children(i int) (first, last int) {
	first = t.Arity*(i-1) + 2
	last = min(first+t.Arity-1, t.Size)
	return first, last
}

// FirstLeaf is the smallest leaf rank.
func (t Tree) FirstLeaf() int {
	if t.Size <= 1 {
		return 1
	}
	return (t.Size-2)/t.Arity + 2
}

// IsLeaf reports whether rank i has no children.
func (t Tree) IsLeaf(i int) bool { return i >= t.FirstLeaf() }

// Depth is the number of edges from the root to rank i.
func (t Tree) Depth(i int) int {
	d := 0
	for i > 1 {
		i = t.Parent(i)
		d++
	}
	return d
}

// Placement says how tree ranks are given to caches.
type Placement int

const (
	// PlacementPaper maps rank i ≥ 2 to ring.Lookup(hash(x, i)), as in
	// Karger et al.: ranks are independent, so one cache may play several.
	PlacementPaper Placement = iota
	// PlacementDistinct maps rank i to the (i−1)-th cache of a per-page
	// rendezvous ranking: no cache plays two ranks of one page's tree.
	PlacementDistinct
)

func (p Placement) String() string {
	switch p {
	case PlacementPaper:
		return "paper"
	case PlacementDistinct:
		return "distinct"
	}
	return fmt.Sprintf("Placement(%d)", int(p))
}

// ParsePlacement parses "paper" or "distinct".
func ParsePlacement(s string) (Placement, error) {
	switch s {
	case "paper":
		return PlacementPaper, nil
	case "distinct":
		return PlacementDistinct, nil
	}
	return 0, fmt.Errorf("routing: placement %q, want paper or distinct", s)
}

// Hop is one cache on a page's path.
type Hop struct {
	Rank   int // the tree rank it plays (the highest, if consecutive ranks collapsed)
	Member int // member index in the ring
}

// AppendPath appends the path of page keyHash from leaf up to rank 2 to dst:
// the caches that play each rank, consecutive duplicates collapsed. The
// origin (rank 1) is not included. With PlacementPaper it allocates nothing
// beyond dst's growth. ranking is the page's rendezvous ranking, needed only
// for PlacementDistinct (see Ranking).
//
// A shape that does not validate, a leaf outside the tree, or a distinct
// placement whose ranking is shorter than the tree's ranks (one cache would
// play two) gives no path: callers build the tree over the ranked members.
func (r *Ring) AppendPath(dst []Hop, keyHash uint64, t Tree, leaf int, p Placement, ranking []int32) []Hop {
	if r.Len() == 0 || t.Size < 2 || t.Validate() != nil || leaf < 2 || leaf > t.Size ||
		p == PlacementDistinct && len(ranking) < t.Size-1 {
		return dst
	}
	start := len(dst)
	for i := leaf; i >= 2; i = t.Parent(i) {
		var m int
		if p == PlacementDistinct {
			m = int(ranking[i-2])
		} else {
			m = r.Lookup(rankHash(keyHash, i))
		}
		if len(dst) > start && dst[len(dst)-1].Member == m {
			dst[len(dst)-1].Rank = i
			continue
		}
		dst = append(dst, Hop{Rank: i, Member: m})
	}
	return dst
}

// RankMember returns the member playing rank i ≥ 2 of page keyHash with the
// paper placement.
func (r *Ring) RankMember(keyHash uint64, i int) int { return r.Lookup(rankHash(keyHash, i)) }

// Ranking returns page keyHash's rendezvous ranking of all members, highest
// score first, appended to dst. It costs O(C log C), cheap for the tens of
// nodes of an edge cluster: the cluster computes it once per miss and
// passes it to AppendPath and for the page's home.
//
// Members of unequal weight are ranked by weighted rendezvous hashing
// (score w / −ln u, u the member's hash for the page in (0, 1)), so a
// member is first for a share of pages proportional to its weight, as its
// share of the ring's points is (a review found the weights ignored here).
// With equal weights the order is the raw scores', the same as before.
func (r *Ring) Ranking(dst []int32, keyHash uint64) []int32 {
	type scored struct {
		score uint64
		w     float64
		idx   int32
	}
	s := make([]scored, len(r.ids))
	for i, h := range r.idHash {
		x := scored{score: scoreHash(keyHash, h), idx: int32(i)}
		if r.weighted {
			u := (float64(x.score>>11) + 0.5) / (1 << 53) // in (0, 1)
			x.w = r.weight[i] / -math.Log(u)
		}
		s[i] = x
	}
	slices.SortFunc(s, func(a, b scored) int {
		switch {
		case a.w > b.w:
			return -1
		case a.w < b.w:
			return 1
		case a.score > b.score:
			return -1
		case a.score < b.score:
			return 1
		}
		return int(a.idx - b.idx)
	})
	for _, x := range s {
		dst = append(dst, x.idx)
	}
	return dst
}
