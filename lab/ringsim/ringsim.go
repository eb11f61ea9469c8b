// Package ringsim holds the routing simulators behind `edge sim ring` and
// `edge sim trees`: ring balance, monotonicity, spread and load over many
// views, and random trees against consistent hashing for hot pages. It is
// research code; a node runs only package routing.
package ringsim

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"strconv"

	"github.com/edgecache/edge/load"
	"github.com/edgecache/edge/routing"
)

// RingConfig configures SimulateRing.
type RingConfig struct {
	Nodes        int     // nodes in the full view
	VNodes       int     // points per node
	Keys         int     // keys hashed
	Views        int     // random partial views for spread and load
	ViewFraction float64 // each view holds this fraction of the nodes (1/t)
	Seed         uint64
}

// RingResult reports the paper's four properties for one ring.
type RingResult struct {
	Nodes                       int     `json:"nodes"`
	VNodes                      int     `json:"vnodes"`
	Keys                        int     `json:"keys"`
	BalanceMaxMean              float64 `json:"balance_max_mean"` // busiest node's keys over the mean
	BalanceMinMean              float64 `json:"balance_min_mean"` // idlest node's keys over the mean
	ArcMaxMean                  float64 `json:"arc_max_mean"`     // largest exact arc share over the mean
	ArcMinMean                  float64 `json:"arc_min_mean"`     // smallest exact arc share over the mean
	AddMoved                    int     `json:"add_moved"`        // keys that changed owner when a node joined
	AddMovedBetweenSurvivors    int     `json:"add_moved_between_survivors"`
	AddExpectedShare            float64 `json:"add_expected_moved"` // Keys/(Nodes+1)
	RemoveMoved                 int     `json:"remove_moved"`
	RemoveMovedBetweenSurvivors int     `json:"remove_moved_between_survivors"`
	Views                       int     `json:"views"`
	ViewFraction                float64 `json:"view_fraction"`
	SpreadMax                   int     `json:"spread_max"`     // most distinct owners one key had across views
	SpreadMean                  float64 `json:"spread_mean"`    // mean distinct owners per key
	LoadMax                     int     `json:"load_max"`       // most distinct keys some view gave one node
	LoadMaxRatio                float64 `json:"load_max_ratio"` // LoadMax over the mean keys per node
	Bound                       float64 `json:"bound_t_log2_c"` // t·log2 C, the paper's O(t log C) scale
}

// SimulateRing measures balance, monotonicity, spread and load.
func SimulateRing(c RingConfig) (RingResult, error) {
	if c.Nodes < 2 || c.Keys < 1 || c.VNodes < 1 || c.ViewFraction <= 0 || c.ViewFraction > 1 || c.Views < 0 {
		return RingResult{}, fmt.Errorf("routing.routing: ring sim needs nodes ≥ 2, keys ≥ 1, vnodes ≥ 1, 0 < view-fraction ≤ 1")
	}
	res := RingResult{Nodes: c.Nodes, VNodes: c.VNodes, Keys: c.Keys, Views: c.Views, ViewFraction: c.ViewFraction}
	members := memberIDs(c.Nodes)
	ring, err := routing.NewRing(members, c.VNodes)
	if err != nil {
		return res, err
	}
	keys := keyHashes(c.Keys)
	owner := make([]int32, len(keys))
	counts := make([]int, c.Nodes)
	for i, k := range keys {
		o := ring.Lookup(k)
		owner[i] = int32(o)
		counts[o]++
	}
	mean := float64(c.Keys) / float64(c.Nodes)
	mx, mn := counts[0], counts[0]
	for _, n := range counts {
		mx, mn = max(mx, n), min(mn, n)
	}
	res.BalanceMaxMean, res.BalanceMinMean = float64(mx)/mean, float64(mn)/mean
	arcs := ring.Arcs()
	amx, amn := arcs[0], arcs[0]
	for _, a := range arcs {
		amx, amn = math.Max(amx, a), math.Min(amn, a)
	}
	res.ArcMaxMean, res.ArcMinMean = amx*float64(c.Nodes), amn*float64(c.Nodes)

	// Monotonicity: add one node; keys may only move to it.
	added := append(memberIDs(c.Nodes), routing.Member{ID: "node-" + strconv.Itoa(c.Nodes)})
	ringAdd, err := routing.NewRing(added, c.VNodes)
	if err != nil {
		return res, err
	}
	newID := "node-" + strconv.Itoa(c.Nodes)
	for i, k := range keys {
		to := ringAdd.Member(ringAdd.Lookup(k))
		if to != ring.Member(int(owner[i])) {
			res.AddMoved++
			if to != newID {
				res.AddMovedBetweenSurvivors++
			}
		}
	}
	res.AddExpectedShare = float64(c.Keys) / float64(c.Nodes+1)
	// Remove one node; only its keys may move.
	rng := rand.New(rand.NewPCG(c.Seed, c.Seed^0x9e3779b97f4a7c15))
	victim := rng.IntN(c.Nodes)
	removed := append(memberIDs(c.Nodes)[:victim:victim], memberIDs(c.Nodes)[victim+1:]...)
	ringRm, err := routing.NewRing(removed, c.VNodes)
	if err != nil {
		return res, err
	}
	for i, k := range keys {
		from := ring.Member(int(owner[i]))
		to := ringRm.Member(ringRm.Lookup(k))
		if to != from {
			res.RemoveMoved++
			if from != members[victim].ID {
				res.RemoveMovedBetweenSurvivors++
			}
		}
	}

	// Spread and load over random views of ⌈F·N⌉ nodes each.
	t := 1 / c.ViewFraction
	res.Bound = t * math.Log2(float64(c.Nodes))
	if c.Views > 0 {
		size := max(1, int(math.Ceil(c.ViewFraction*float64(c.Nodes))))
		globalIdx := make(map[string]int32, c.Nodes)
		for i, m := range members {
			globalIdx[m.ID] = int32(i)
		}
		seen := make([][]int32, len(keys)) // distinct owners of each key over all views
		loadCount := make([]int, c.Nodes)  // distinct keys some view gave each node
		for range c.Views {
			perm := rng.Perm(c.Nodes)[:size]
			view := make([]routing.Member, size)
			for j, p := range perm {
				view[j] = members[p]
			}
			vr, err := routing.NewRing(view, c.VNodes)
			if err != nil {
				return res, err
			}
			toGlobal := make([]int32, vr.Len())
			for j := range toGlobal {
				toGlobal[j] = globalIdx[vr.Member(j)]
			}
			for i, k := range keys {
				o := toGlobal[vr.Lookup(k)]
				if !slices.Contains(seen[i], o) {
					seen[i] = append(seen[i], o)
					loadCount[o]++
				}
			}
		}
		total := 0
		for i := range seen {
			s := len(seen[i])
			total += s
			res.SpreadMax = max(res.SpreadMax, s)
		}
		res.SpreadMean = float64(total) / float64(len(keys))
		for _, l := range loadCount {
			res.LoadMax = max(res.LoadMax, l)
		}
		res.LoadMaxRatio = float64(res.LoadMax) / mean
	}
	return res, nil
}

// TreeConfig configures SimulateTrees: the paper's static batch model.
type TreeConfig struct {
	Caches    int
	Arity     int // d
	Q         int // requests a cache forwards before storing
	Requests  int
	Hot       bool    // every request is for one page
	ZipfS     float64 // otherwise pages are drawn Zipf(s) over Pages
	Pages     int
	Placement routing.Placement
	Scheme    string // "tree", "ring" (plain consistent hashing: one owner per page) or "hybrid"
	// HotThreshold is, for the hybrid scheme, how many requests a page gets
	// through its rank-2 cache alone (stored on the first fetch, like the
	// ring) before requests start at random leaves of its tree.
	HotThreshold int
	VNodes       int
	Seed         uint64
}

// TreeResult reports the load the scheme put on caches and the origin.
type TreeResult struct {
	Scheme                  string  `json:"scheme"`
	Placement               string  `json:"placement"`
	Caches                  int     `json:"caches"`
	Arity                   int     `json:"d"`
	Q                       int     `json:"q"`
	Requests                int     `json:"requests"`
	MaxLoad                 int     `json:"max_load"`       // messages received by the busiest cache
	MaxLoadRatio            float64 `json:"max_load_ratio"` // MaxLoad over R/C
	MsgsPerRequest          float64 `json:"msgs_per_request"`
	OriginFetches           int     `json:"origin_fetches"`
	MaxOriginFetchesPerPage int     `json:"max_origin_fetches_per_page"`
	Copies                  int     `json:"copies"` // stored copies at the end, over all pages
	MeanHops                float64 `json:"mean_hops"`
	MaxHops                 int     `json:"max_hops"`
	DistinctPages           int     `json:"distinct_pages"`
}

// SimulateTrees runs requests one after another (the paper's static batch
// model: nothing is evicted). A request enters at a uniformly random leaf of
// its page's tree and climbs; the first cache holding the page answers. Each
// cache passed counts the request for (page, rank) and stores the page when
// the response passes back down if its count reached q. Every cache a
// request reaches receives one message.
func SimulateTrees(c TreeConfig) (TreeResult, error) {
	res := TreeResult{Scheme: c.Scheme, Placement: c.Placement.String(), Caches: c.Caches, Arity: c.Arity, Q: c.Q, Requests: c.Requests}
	if c.Caches < 1 || c.Requests < 1 || c.Q < 1 {
		return res, fmt.Errorf("routing.routing: trees sim needs caches, requests and q ≥ 1")
	}
	if c.Scheme != "tree" && c.Scheme != "ring" && c.Scheme != "hybrid" {
		return res, fmt.Errorf("routing.routing: scheme %q, want tree, ring or hybrid", c.Scheme)
	}
	if !c.Hot && (c.Pages < 1 || c.ZipfS <= 0) {
		return res, fmt.Errorf("routing.routing: give --hot or --zipf S > 0 with --pages P ≥ 1")
	}
	tree := routing.Tree{Size: c.Caches, Arity: c.Arity}
	if c.Scheme != "ring" {
		if err := tree.Validate(); err != nil {
			return res, err
		}
	}
	if c.VNodes == 0 {
		c.VNodes = routing.DefaultVNodes
	}
	ring, err := routing.NewRing(memberIDs(c.Caches), c.VNodes)
	if err != nil {
		return res, err
	}
	rng := rand.New(rand.NewPCG(c.Seed, c.Seed+1))
	var zipf *load.ZipfSampler
	if !c.Hot {
		zipf = load.NewZipf(c.ZipfS, c.Pages)
	}
	type pageState struct {
		held     map[int]bool // caches holding the page
		counts   map[[2]int]int
		origin   int
		ranking  []int32
		requests int
	}
	pages := map[int]*pageState{}
	msgs := make([]int, c.Caches)
	var path []routing.Hop
	totalHops, totalMsgs := 0, 0
	firstLeaf := tree.FirstLeaf()
	for range c.Requests {
		page := 0
		if zipf != nil {
			page = zipf.Sample(rng)
		}
		ps := pages[page]
		if ps == nil {
			ps = &pageState{held: map[int]bool{}, counts: map[[2]int]int{}}
			pages[page] = ps
		}
		kh := routing.KeyHash("page-" + strconv.Itoa(page))
		ps.requests++
		if c.Scheme == "ring" || (c.Scheme == "hybrid" && ps.requests <= c.HotThreshold) {
			o := ring.Lookup(kh)
			if c.Scheme == "hybrid" {
				o = homeOf(ring, kh, c.Placement, &ps.ranking)
			}
			msgs[o]++
			totalMsgs++
			totalHops++
			res.MaxHops = max(res.MaxHops, 1)
			if !ps.held[o] {
				ps.origin++
				ps.held[o] = true
			}
			continue
		}
		if c.Placement == routing.PlacementDistinct && ps.ranking == nil {
			ps.ranking = ring.Ranking(nil, kh)
		}
		leaf := firstLeaf
		if c.Caches > 1 {
			leaf = firstLeaf + rng.IntN(c.Caches-firstLeaf+1)
		}
		path = ring.AppendPath(path[:0], kh, tree, leaf, c.Placement, ps.ranking)
		hops := 0
		served := false
		var passed []routing.Hop
		for _, h := range path {
			msgs[h.Member]++
			totalMsgs++
			hops++
			if ps.held[h.Member] {
				served = true
				break
			}
			passed = append(passed, h)
		}
		if !served && c.Scheme == "hybrid" {
			// The page's home (its rank-2 cache) stands in front of the
			// origin: a climb that missed everywhere asks it before fetching.
			home := homeOf(ring, kh, c.Placement, &ps.ranking)
			if path[len(path)-1].Member != home {
				msgs[home]++
				totalMsgs++
				hops++
				served = ps.held[home]
				ps.held[home] = true
			}
		}
		if !served {
			ps.origin++
		}
		for _, h := range passed {
			k := [2]int{h.Member, h.Rank}
			ps.counts[k]++
			if ps.counts[k] >= c.Q {
				ps.held[h.Member] = true
			}
		}
		totalHops += hops
		res.MaxHops = max(res.MaxHops, hops)
	}
	for _, m := range msgs {
		res.MaxLoad = max(res.MaxLoad, m)
	}
	res.MaxLoadRatio = float64(res.MaxLoad) / (float64(c.Requests) / float64(c.Caches))
	res.MsgsPerRequest = float64(totalMsgs) / float64(c.Requests)
	res.MeanHops = float64(totalHops) / float64(c.Requests)
	res.DistinctPages = len(pages)
	keys := make([]int, 0, len(pages))
	for p := range pages {
		keys = append(keys, p)
	}
	sort.Ints(keys)
	for _, p := range keys {
		ps := pages[p]
		res.OriginFetches += ps.origin
		res.MaxOriginFetchesPerPage = max(res.MaxOriginFetchesPerPage, ps.origin)
		res.Copies += len(ps.held)
	}
	return res, nil
}

// homeOf returns the cache playing rank 2 of a page's tree: its single
// owner while cold, and the last stop before the origin once hot.
func homeOf(ring *routing.Ring, kh uint64, p routing.Placement, ranking *[]int32) int {
	if p == routing.PlacementDistinct {
		if *ranking == nil {
			*ranking = ring.Ranking(nil, kh)
		}
		return int((*ranking)[0])
	}
	return ring.RankMember(kh, 2)
}

// memberIDs names n members node-0 … node-(n−1).
func memberIDs(n int) []routing.Member {
	ms := make([]routing.Member, n)
	for i := range ms {
		ms[i] = routing.Member{ID: "node-" + strconv.Itoa(i)}
	}
	return ms
}

// keyHashes hashes the keys key-0 … key-(n−1).
func keyHashes(n int) []uint64 {
	ks := make([]uint64, n)
	for i := range ks {
		ks[i] = routing.KeyHash("key-" + strconv.Itoa(i))
	}
	return ks
}
