package cluster

import (
	"context"
	"errors"
	"io"
	"math/bits"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/edgecache/edge/indicators"
	"github.com/edgecache/edge/origin"
	"github.com/edgecache/edge/proxy"
	"github.com/edgecache/edge/routing"
)

var _ proxy.Fetcher = (*Cluster)(nil)

// Fetch gets a response for a miss. At the ingress (a client request) it
// plans: probe the peers worth asking, then climb the page's path. At a
// peer (a climb that reached us and missed) it continues the climb with the
// path it was given, never re-planning. Every cache applies the q-rule to
// decide whether to keep a copy (Result.Keep). fr.Key is the cache key the
// proxy computed for fr.Req; fr.Route, the route the peer handler read, is
// set at a peer and nil at the ingress.
func (c *Cluster) Fetch(ctx context.Context, fr proxy.FetchRequest) (proxy.Result, error) {
	mark := c.copies.mark(time.Now())
	res, err := c.fetch(ctx, fr, mark)
	if err == nil && res.Keep && res.From == proxy.UpstreamPeer && !c.copies.keepable(mark, fr.Key, res.Resp.Header, peerAge(res), time.Now()) {
		// A purge naming the page went round meanwhile: the peer may not
		// have had it yet (purgehold.go).
		res.Keep, res.PurgeHeld = false, true
		c.copies.notKept.Add(1)
		c.metrics.PurgeHeldCopies.Inc()
	}
	if err == nil && res.Keep && res.From == proxy.UpstreamPeer && (c.madeBeforeAReturn(res, time.Now()) || heldOnTheWay(res.Resp.Header)) {
		// The peer has just come back (or joined) and may not have had
		// the purges it missed yet (returned.go).
		res.Keep, res.PurgeHeld = false, true
		c.copies.notKept.Add(1)
		c.metrics.PurgeHeldCopies.Inc()
	}
	return res, err
}

// climbable reports whether a request may go to the page's peers: a GET
// or HEAD without a body, the only requests a peer answers from a cache
// or climbs on with. Anything else (a POST, a PUT, a GET with a body) goes
// from the ingress to its origin, once: a peer request carries no body,
// so a pass of a POST through the page's home reached the origin empty,
// and the climb's fallbacks (the peer too slow, a 5xx) sent it again
// from the ingress: orders lost and orders taken twice (a review's
// TestS30OriginClusterPostReachesOriginOnceWithItsBody and the two after
// it).
func climbable(r *http.Request) bool {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		return false
	}
	return r.ContentLength == 0 && (r.Body == nil || r.Body == http.NoBody)
}

// heldOnTheWay reports whether a cache on the way (a peer that relayed
// the page from another) served it without keeping it because of a purge
// hold or a peer's return: this node does not keep it either (a review's
// TestAReturnedPeersOldPageRelayedByAnIntermediateIsNotKept). Cache-Status
// is signed with the answer.
func heldOnTheWay(h http.Header) bool {
	for _, v := range h.Values("Cache-Status") {
		if strings.Contains(v, "detail="+proxy.DetailPurged) {
			return true
		}
	}
	return false
}

// peerAge is how old a peer's page says it is (0 without a valid Age).
func peerAge(res proxy.Result) time.Duration {
	if res.Resp == nil {
		return 0
	}
	age, _ := proxy.ParseAge(res.Resp.Header)
	return age
}

func (c *Cluster) fetch(ctx context.Context, fr proxy.FetchRequest, mark holdMark) (proxy.Result, error) {
	kh := routing.KeyHash(fr.Key)
	if rt, ok := fr.Route.(*route); ok && rt != nil {
		return c.continueClimb(ctx, fr, kh, rt)
	}
	if c.cfg.Mode == routing.ModeNone || !climbable(fr.Req) {
		return c.origin.Fetch(ctx, fr)
	}
	start := time.Now()
	path, home, tree := c.plan(kh)
	isHome := home == c.cfg.NodeID
	if fr.Direct {
		// Placed as waiting on no peer (MayWaitOnPeers), so climbs may
		// have joined its fill: it must not climb (the page may have
		// turned hot since).
		path, tree = nil, false
	}
	// A probe asks only-if-cached in place of the request's own
	// Cache-Control: a request with directives of its own (a reload's
	// no-cache, Pragma) would be answered from a peer's store with what it
	// asked to have checked, so it climbs with them (a review's test,
	// TestNoCacheIsNotAnsweredByAProbe).
	var negatives *pendingProbes
	var asked *candidateSet
	if c.cfg.Selection != SelectionOff && !proxy.HasOwnDirectives(fr.Req) {
		var res proxy.Result
		var ok bool
		res, ok, negatives, asked = c.probe(ctx, fr, kh, path)
		if ok {
			return c.probeResult(kh, isHome, res), nil
		}
	}
	climb := func() (proxy.Result, error) {
		if negatives != nil {
			return c.climbBeside(ctx, fr, kh, path, tree, isHome, start, negatives)
		}
		return c.climbResult(fr, kh, isHome, start, c.climbPath(ctx, fr, kh, path, tree), nil)
	}
	if c.mayServeStaleEarly(fr, kh, path, asked) {
		return c.staleBeside(ctx, fr, kh, isHome, asked, mark, climb)
	}
	res, err := climb()
	if err != nil && asked != nil && ctx.Err() == nil {
		return c.staleOnFailure(ctx, fr, kh, isHome, asked, mark, err)
	}
	return res, err
}

// mayServeStaleEarly reports whether a stale copy the probes found may
// answer while the climb is out (Config.StaleWhileClimbing,
// stalefallback.go): the climb goes to one peer, the page's home, which
// refreshes the page (on a tree's path a hop farther up may hold it
// fresh); that first hop, asked with the probes, answered before the
// other probes were in that it holds no fresh copy (a hop that does would
// answer the climb a moment later: a stale copy must not beat it;
// review_s50; its answer is not waited for: a slow hop would hold the
// request, review_s51); the fetch is no revalidation of a copy this node
// holds (a background refresh took a peer's stale copy as its refresh:
// review_s50); a peer that answered stale may still be asked; and the last
// such climb's refresh was not thrown away here (staleOwed).
func (c *Cluster) mayServeStaleEarly(fr proxy.FetchRequest, kh uint64, path []hop, asked *candidateSet) bool {
	return asked != nil && c.cfg.StaleWhileClimbing && !fr.Revalidates && len(path) == 1 &&
		asked.staleAt.Load() != 0 && asked.firstHopNoFresh.Load() &&
		c.stillAskable(asked, asked.staleAt.Load()) != 0 && !c.staleOwed.take(kh)
}

var _ proxy.PeerWaiter = (*Cluster)(nil)

// ClimbOrder implements proxy.PeerWaiter: a climb's wait order.
func (c *Cluster) ClimbOrder(r any) (proxy.WaitOrder, bool) {
	if rt, ok := r.(*route); ok && rt != nil && rt.mode == hopClimb {
		return rt.order, true
	}
	return proxy.WaitOrder{}, false
}

// MayWaitOnPeers implements proxy.PeerWaiter: whether a fill for key,
// led for a climb along route or for this node's client (route nil), may
// ask a peer to fetch. A climb may when a cache is left on its path; a
// client's fill, unless this node is alone or the page's home and the
// page is cold (no tree), as plan will judge it with this request
// counted. Fetch holds a false to it (FetchRequest.Direct).
func (c *Cluster) MayWaitOnPeers(key string, r any) bool {
	if rt, ok := r.(*route); ok && rt != nil {
		for _, s := range rt.remaining {
			if id, _, _ := strings.Cut(s, ":"); id != "" && id != c.cfg.NodeID {
				return true
			}
		}
		return false
	}
	kh := routing.KeyHash(key)
	switch c.cfg.Mode {
	case routing.ModeNone:
		return false
	case routing.ModeRing:
	case routing.ModeHybrid:
		if n, _ := c.hot.Peek(kh, 0); n+1 >= c.hot.Q() {
			return c.router.Ring().Len() > 1 // hot: a tree
		}
	default:
		return c.router.Ring().Len() > 1 // a tree: any leaf's path may hold a peer
	}
	_, home, _ := c.planFor(kh, false, func(int) int { return 0 }) // the home alone
	return home != c.cfg.NodeID
}

// probeResult finishes a probe's winning answer: an origin that answered a
// slow probe winner's race (whole.go) stands for the climb, so the home
// keeps its pages.
func (c *Cluster) probeResult(kh uint64, isHome bool, res proxy.Result) proxy.Result {
	res.Keep = (isHome && res.From != proxy.UpstreamPeer) || c.keepAtIngress(kh)
	return res
}

// climbed is a climb's outcome.
type climbed struct {
	res        proxy.Result
	becameHome bool
	err        error
}

// climbPath climbs the page's path from its first hop, as a cold page's
// (climb's cold: a next home may be asked) unless the path is a tree's.
func (c *Cluster) climbPath(ctx context.Context, fr proxy.FetchRequest, kh uint64, path []hop, tree bool) climbed {
	res, becameHome, err := c.climb(ctx, fr, kh, path, 0, !tree)
	return climbed{res, becameHome, err}
}

// climbResult finishes a climb: its latency is recorded (the miss
// penalty), and the home always keeps its pages (it stands in front of the
// origin). cancel, if not nil, is the context the climb ran under of its
// own: it ends once the answer's body is closed, or now if there is none.
func (c *Cluster) climbResult(fr proxy.FetchRequest, kh uint64, isHome bool, start time.Time, cl climbed, cancel context.CancelFunc) (proxy.Result, error) {
	if cl.err != nil {
		if cancel != nil {
			cancel()
		}
		return proxy.Result{}, cl.err
	}
	if cancel != nil {
		cl.res.Resp.Body = &cancelOnClose{ReadCloser: cl.res.Resp.Body, cancel: cancel}
	}
	c.recordClimb(siteName(fr, c.siteOf), time.Since(start))
	cl.res.Keep = isHome || cl.becameHome || c.keepAtIngress(kh)
	return cl.res, nil
}

// candidateSet is the peers worth considering for a probe, with the
// selection inputs: c_j, ρ_j and the miss penalty M.
type candidateSet struct {
	cands       []indicators.Candidate
	peers       []*Peer
	ids         []string              // the peers' ids, read with the set (an id can change under c.mu)
	replicas    []*indicators.Replica // their replicas, read with the set (a restart replaces one under c.mu)
	indicated   []bool
	onPath      []bool
	home        []bool    // the peer is a home of the page (home-aware policies)
	derivedNu   []float64 // fna-learned, fna-rate: a home's derived ν, which its probe's outcome is recorded with (−1: not a home)
	negative    uint64    // mask of the negatively indicated candidates
	missPenalty float64   // M, in the unit of c_j
	climbS      float64   // the site's measured climb latency M came from (s; 0: none yet)

	// firstHop is the climb's first hop, left out of the candidates, if
	// it may be asked beside the probes (Config.FirstHopWithProbes:
	// trusted, owing no purge); firstHopBit is its bit once withFirstHop
	// has added it (0 before).
	firstHop    *Peer
	firstHopBit uint64

	// staleAt marks the entries that answered the page stale (probe sets
	// it; stalefallback.go); firstHopNoFresh, that the first hop's probe
	// answered without a fresh copy (a miss, or stale).
	staleAt         *atomic.Uint64
	firstHopNoFresh *atomic.Bool
}

// isFirstHop reports whether entry i is the first hop withFirstHop added.
func (cs *candidateSet) isFirstHop(i int) bool { return cs.firstHopBit == 1<<uint(i) }

// withFirstHop adds the climb's first hop to cs, to be asked beside the
// chosen probes, and returns its bit (0 when there is none or no room).
// It is no candidate: the selection did not choose it, and its answers
// teach no estimate (recordAnswer), since the peer is the page's home
// here and its indicator's misses say nothing of its other pages.
func (cs *candidateSet) withFirstHop() uint64 {
	p := cs.firstHop
	if p == nil || cs.firstHopBit != 0 || len(cs.cands) >= indicators.MaxCandidates {
		return 0
	}
	cs.firstHopBit = 1 << uint(len(cs.cands))
	cs.cands = append(cs.cands, indicators.Candidate{Rho: 1})
	cs.peers = append(cs.peers, p)
	cs.ids = append(cs.ids, p.ID)
	cs.replicas = append(cs.replicas, p.replica)
	cs.indicated = append(cs.indicated, false)
	cs.onPath = append(cs.onPath, true)
	cs.home = append(cs.home, false)
	cs.derivedNu = append(cs.derivedNu, -1)
	return cs.firstHopBit
}

// candidates returns every trusted peer but the climb's first hop (unless
// Config.ProbeFirstHop: probing the peer the climb asks next can only add
// a round trip), negatively indicated ones included, priced for site (M is
// per site). count says whether the indications feed the q estimates (a
// real request) or not (the route explorer).
//
// ρ_j depends on the policy. fno: π for a positive indication, 1 for a
// negative one. fna (the paper): π or ν from the peer's estimates over all
// pages. Home-aware policies (fna-home, fna-learned, fna-rate) keep the estimates of
// a page's homes (its home in each region, with regional homes) over the
// pages homed there; a peer that is neither a home nor on the path holds a
// page it is negatively indicated for only by chance (an ingress copy, an
// older view), so its ν is 1.
func (c *Cluster) candidates(key, site string, path []hop, count bool) candidateSet {
	onPath := map[string]bool{}
	for _, h := range path {
		onPath[h.id] = true
	}
	var homes map[string]bool
	if c.cfg.Selection.HomeAware() {
		homes = c.pageHomes(routing.KeyHash(key))
	}
	var cs candidateSet
	c.mu.Lock()
	defer c.mu.Unlock()
	firstHop := ""
	if !c.cfg.ProbeFirstHop {
		for _, h := range path {
			if p := c.peers[h.id]; p != nil && p.trusted {
				firstHop = h.id // the climb's first request goes here
				if c.cfg.FirstHopWithProbes && c.owed.owedTo(p.ID) == 0 {
					cs.firstHop = p
				}
				break
			}
		}
	}
	minCost := 0.0
	for _, p := range c.peers {
		if ac := c.accessCost(p); p.trusted && ac > 0 && (minCost == 0 || ac < minCost) {
			minCost = ac
		}
	}
	cs.missPenalty, cs.climbS = c.missPenalty(site, minCost)
	keyBytes := []byte(key)
	for _, p := range c.peers {
		if !c.mayAskLocked(p) {
			continue
		}
		isHome := homes[p.ID]
		ind := p.replica.Test(keyBytes)
		if count {
			// The first hop's indication counts too: it is the region's
			// home of every cold page, and its q over its own pages would
			// otherwise be measured over hot pages only.
			p.replica.Count(ind, isHome)
		}
		if p.ID == firstHop {
			continue
		}
		var e indicators.Exclusion
		derivedNu := -1.0
		switch {
		case isHome && c.cfg.Selection == SelectionFNALearned:
			e, derivedNu = p.replica.LearnedHomeExclusion()
		case isHome && c.cfg.Selection == SelectionFNARate:
			e, derivedNu = p.replica.RateHomeExclusion()
		case isHome:
			e = p.replica.HomeExclusion()
		default:
			e = p.replica.Exclusion()
			if homes != nil && !onPath[p.ID] {
				e.Nu = 1
			}
		}
		rho := e.Pi
		if !ind {
			rho = e.Nu
			if c.cfg.Selection == SelectionFNO {
				rho = 1
			}
		}
		if c.cfg.Selection == SelectionRaceAll {
			rho = 0 // asked whatever its indicator says
		}
		if count && rho >= 1 && (c.cfg.Selection != SelectionFNARate || ind || !isHome) {
			// It can never be chosen (asking it lowers no miss chance), and
			// with more than MaxCandidates peers it would take the place of
			// one that can. The route explorer still lists it.
			continue
		}
		if !ind {
			cs.negative |= 1 << uint(len(cs.cands))
		}
		cs.cands = append(cs.cands, indicators.Candidate{Cost: c.costs(p, minCost), Rho: rho})
		cs.peers = append(cs.peers, p)
		cs.ids = append(cs.ids, p.ID)
		cs.replicas = append(cs.replicas, p.replica)
		cs.indicated = append(cs.indicated, ind)
		cs.onPath = append(cs.onPath, onPath[p.ID])
		cs.home = append(cs.home, isHome)
		cs.derivedNu = append(cs.derivedNu, derivedNu)
		if len(cs.cands) == indicators.MaxCandidates {
			break
		}
	}
	return cs
}

// choose returns the candidates to probe, as a mask over cs. It chooses
// among those that can be chosen (ρ < 1) only: a request's set holds no
// others, the route explorer's lists them too, and both must choose alike
// (SelectNoWorse is exact only up to ExactUpTo candidates).
func (c *Cluster) choose(cs *candidateSet) uint64 {
	if c.cfg.Selection == SelectionRaceAll {
		return 1<<uint(len(cs.cands)) - 1
	}
	var usable [indicators.MaxCandidates]indicators.Candidate
	var index [indicators.MaxCandidates]int
	var negative uint64
	n := 0
	for i, cand := range cs.cands {
		if cand.Rho < 1 {
			if cs.negative&(1<<uint(i)) != 0 {
				negative |= 1 << uint(n)
			}
			usable[n], index[n] = cand, i
			n++
		}
	}
	var m uint64
	if c.cfg.Selection.neverWorse() {
		m = indicators.SelectNoWorse(usable[:n], cs.missPenalty, negative)
	} else {
		m = indicators.Select(usable[:n], cs.missPenalty)
	}
	var mask uint64
	for ; m != 0; m &= m - 1 {
		mask |= 1 << uint(index[bits.TrailingZeros64(m)])
	}
	return mask
}

// explore returns the negatively indicated home fna-rate also asks now
// and then beyond what chosen holds (indicators.ExploreHome), so that a
// home's rate is learnt again where it had stopped paying: a rate learnt
// only from the probes it chose would stay where it last was. The route
// explorer shows choose's set alone.
func (c *Cluster) explore(cs *candidateSet, chosen uint64) uint64 {
	if c.cfg.Selection != SelectionFNARate {
		return 0
	}
	var left uint64
	for i := range cs.cands {
		if cs.negative&(1<<uint(i)) != 0 && cs.home[i] {
			left |= 1 << uint(i)
		}
	}
	return indicators.ExploreHome(left&^chosen, func(i int) float64 { return cs.cands[i].Cost }, cs.missPenalty, topLevelDraws{})
}

// topLevelDraws draws from math/rand/v2's top-level functions.
type topLevelDraws struct{}

func (topLevelDraws) IntN(n int) int   { return rand.IntN(n) }
func (topLevelDraws) Float64() float64 { return rand.Float64() }

// pageHomes returns the peers that are a home of the page with hash kh:
// its home over the whole view and, with regional homes, its home in each
// region (the first member of its ranking in that region), as planFor
// computes them.
func (c *Cluster) pageHomes(kh uint64) map[string]bool {
	ring := c.router.Ring()
	n := ring.Len()
	homes := make(map[string]bool, 2)
	if n <= 1 {
		return homes
	}
	var ranking []int32
	if c.cfg.Placement == routing.PlacementDistinct {
		ranking = ring.Ranking(make([]int32, 0, n), kh)
	}
	if c.cfg.Mode == routing.ModeRing && !c.cfg.RegionalHomes {
		homes[ring.Member(ring.Lookup(kh))] = true
		return homes
	}
	if !c.cfg.RegionalHomes || ranking == nil {
		homes[ring.Member(homeIndex(ring, kh, ranking))] = true
		return homes
	}
	regions := c.memberRegions()
	regions[c.cfg.NodeID] = c.cfg.Region
	seen := make(map[string]bool, 2)
	for _, i := range ranking {
		id := ring.Member(int(i))
		// A peer whose region is not known yet (no heartbeat) is not
		// local to any region: planFor keeps it off every climb.
		if r := regions[id]; r != "" && !seen[r] {
			seen[r] = true
			homes[id] = true
		}
	}
	return homes
}

// hop is one cache of a climb.
type hop struct {
	id   string
	rank int
}

// plan computes the page's climb path over the current view, without self,
// and the page's home. ring: the owner only. tree: a random leaf up to the
// children of the root. hybrid: the home (rank 2) while the page is cold,
// then the tree with the home as the last stop before the origin. It counts
// the request towards the page being hot and records the tree path length.
func (c *Cluster) plan(kh uint64) (path []hop, home string, tree bool) {
	hot := true
	if c.cfg.Mode == routing.ModeHybrid {
		_, hot = c.hot.Observe(kh, 0)
	}
	path, home, tree = c.planFor(kh, hot, rand.IntN)
	if c.suspected.Load() > 0 {
		c.countReroute(kh, home)
	}
	if tree {
		c.metrics.TreeHops.Observe(float64(len(path)))
	}
	return path, home, tree
}

// planFor computes, from one snapshot of the view, the path for a page
// known to be hot or cold and the page's home; tree reports whether the
// path came from the page's tree. pick chooses the leaf (random in service,
// fixed when explaining). It records nothing, so explaining a route does
// not disturb the metrics.
func (c *Cluster) planFor(kh uint64, hot bool, pick func(int) int) (path []hop, home string, tree bool) {
	ring := c.router.Ring()
	n := ring.Len()
	if n <= 1 {
		return nil, c.cfg.NodeID, false // alone: this node is every page's home
	}
	var ranking []int32
	if c.cfg.Placement == routing.PlacementDistinct {
		// O(C log C) over the view, on every miss (the home depends on it):
		// cheap for the tens of nodes an edge cluster has.
		ranking = ring.Ranking(make([]int32, 0, n), kh)
	}
	local := func(string) bool { return true }
	if c.cfg.RegionalHomes && ranking != nil {
		regions := c.memberRegions()
		local = func(id string) bool { return id == c.cfg.NodeID || regions[id] == c.cfg.Region }
	}
	home = c.pageHome(ring, kh, ranking, local)
	var out []hop
	add := func(id string, rank int) {
		if id == c.cfg.NodeID || !local(id) {
			return // with regional homes, a climb stays in the region
		}
		if c.cfg.RegionalHomes && id == home {
			rank = 2 // the regional home plays the home's rank wherever the tree puts it
		}
		for _, h := range out {
			if h.id == id {
				return
			}
		}
		out = append(out, hop{id, rank})
	}
	switch c.cfg.Mode {
	case routing.ModeRing:
		add(home, 2)
		return out, home, false
	case routing.ModeHybrid:
		if !hot {
			add(home, 2)
			return out, home, false
		}
	}
	t := routing.Tree{Size: n, Arity: c.cfg.Arity}
	first := t.FirstLeaf()
	leaf := first + pick(n-first+1)
	var hops [16]routing.Hop
	for _, h := range ring.AppendPath(hops[:0], kh, t, leaf, c.cfg.Placement, ranking) {
		add(ring.Member(h.Member), h.Rank)
	}
	if c.cfg.Mode == routing.ModeHybrid {
		add(home, 2)
	}
	return out, home, true
}

// memberRegions maps each peer to its region, as its heartbeats say.
func (c *Cluster) memberRegions() map[string]string {
	c.mu.Lock()
	defer c.mu.Unlock()
	m := make(map[string]string, len(c.peers))
	for id, p := range c.peers {
		m[id] = p.region
	}
	return m
}

// pageHome is the page's home over ring: in ring mode (without regional
// homes) its owner, which keeps the page; otherwise the member playing rank
// 2 of its tree, or with regional homes the first member of its ranking
// that is local (in this node's region). planFor routes by it and
// countReroute asks it of the all-members ring.
func (c *Cluster) pageHome(ring *routing.Ring, kh uint64, ranking []int32, local func(string) bool) string {
	if c.cfg.Mode == routing.ModeRing && !c.cfg.RegionalHomes {
		return ring.Member(ring.Lookup(kh))
	}
	if c.cfg.RegionalHomes && ranking != nil {
		for _, i := range ranking {
			if id := ring.Member(int(i)); local(id) {
				return id // the page's home in this region
			}
		}
	}
	return ring.Member(homeIndex(ring, kh, ranking))
}

// homeIndex is the member playing rank 2 of the page's tree: its home.
func homeIndex(ring *routing.Ring, kh uint64, ranking []int32) int {
	if ranking != nil {
		return int(ranking[0])
	}
	return ring.RankMember(kh, 2)
}

// probe asks the selected peers, in parallel, whether they hold the page
// (only-if-cached); the first usable answer wins and the rest are cancelled.
// ok is false when no peer's answer could be used: the climb goes on.
// With Config.NegativeProbesBesideClimb the answers of negatively
// indicated peers that more likely miss than hit are not waited for: when
// every other probe missed, negatives holds their answers still to come,
// for climbBeside to race against the climb.
//
// asked is the set the probes were sent to (nil if none was), for
// staleFallback once the climb has failed.
func (c *Cluster) probe(ctx context.Context, fr proxy.FetchRequest, kh uint64, path []hop) (res proxy.Result, ok bool, negatives *pendingProbes, asked *candidateSet) {
	cs := c.candidates(fr.Key, siteName(fr, c.siteOf), path, true)
	if len(cs.cands) == 0 {
		return proxy.Result{}, false, nil, nil
	}
	mask := c.choose(&cs)
	mask |= c.explore(&cs, mask)
	if mask == 0 {
		return proxy.Result{}, false, nil, nil
	}
	cs.staleAt, cs.firstHopNoFresh = new(atomic.Uint64), new(atomic.Bool)
	// The probe's deadline is for the answers' headers only: a winner's
	// body is then read for as long as the peer keeps sending (on a lossy
	// link TCP may take seconds), bounded by send's idle timeout and by
	// the peer being suspected. A deadline on the whole context cut such
	// bodies short, mid-response to the client.
	pctx, cancel := context.WithCancel(ctx)
	waitFor, beside := c.splitProbes(&cs, mask)
	var firstHop uint64
	if waitFor != 0 {
		// The request is about to wait for probes before it climbs: the
		// first hop, asked only after them otherwise, is asked with them
		// (Config.FirstHopWithProbes). A climb that starts at once (no
		// probe to wait for, race-all) asks it at once anyway.
		firstHop = cs.withFirstHop()
	}
	neg := &pendingProbes{cs: &cs, cancel: cancel}
	neg.answers, neg.left = c.sendProbes(pctx, fr.Req, fr.Key, cs.peers, beside)
	answers := make(chan probeAnswer, bits.OnesCount64(waitFor|firstHop))
	sent := c.sendProbesOn(pctx, answers, fr.Req, fr.Key, cs.peers, waitFor)
	// The first hop's probe has a context of its own, ended when the
	// request climbs to that peer instead (firstHit stops waiting for
	// it): an answer after that would find what the climb stored there.
	fctx, cancelFirstHop := context.WithCancel(ctx)
	sent += c.sendProbesOn(fctx, answers, fr.Req, fr.Key, cs.peers, firstHop)
	win, winner, got := c.firstHit(answers, sent, neg, &cs)
	if win == nil {
		cancelFirstHop()
		if got < sent {
			go c.drainAnswers(answers, sent-got, &cs, nil)
		}
		if neg.left > 0 {
			return proxy.Result{}, false, neg, &cs
		}
		cancel()
		return proxy.Result{}, false, nil, &cs
	}
	// The winner's body and the answers still out hold the probes'
	// contexts until both are done: ended when the winner's body closed,
	// they cancelled the answers still to come, and a far peer's answer
	// after a near winner (the first hop's, often) taught no estimate.
	holders := 2
	if neg.left > 0 {
		holders++
	}
	release := afterAll(holders, func() { cancel(); cancelFirstHop() })
	win.Body = &cancelOnClose{ReadCloser: win.Body, cancel: release}
	go c.drainAnswers(answers, sent-got, &cs, release)
	if neg.left > 0 {
		go c.drainAnswers(neg.answers, neg.left, &cs, release)
	}
	res, ok = c.settle(ctx, fr, win, winner)
	if !ok {
		// The winner's body failed before a byte was sent: the request
		// climbs, to the first hop first (a review's test,
		// TestS46SettleFailureClimbsWhileTheFirstHopProbeIsOut).
		cancelFirstHop()
	}
	return res, ok, nil, &cs
}

// afterAll returns a function that calls f on its n-th call.
func afterAll(n int, f func()) func() {
	var left atomic.Int32
	left.Store(int32(n))
	return func() {
		if left.Add(-1) == 0 {
			f()
		}
	}
}

// splitProbes splits the chosen probes (mask) into those the request
// waits for before it climbs and those whose answers race the climb.
func (c *Cluster) splitProbes(cs *candidateSet, mask uint64) (waitFor, beside uint64) {
	switch {
	case c.cfg.Selection == SelectionRaceAll:
		return 0, mask
	case c.cfg.NegativeProbesBesideClimb:
		beside = cs.unlikelyNegatives(c.raceAbove) & mask
		return mask &^ beside, beside
	}
	return mask, 0
}

// drainAnswers records and closes the n answers still to come on answers,
// then calls done (if any): each comes within its own header timer, and an
// unclosed one would keep its request registered with its peer.
func (c *Cluster) drainAnswers(answers <-chan probeAnswer, n int, cs *candidateSet, done func()) {
	for range n {
		a := <-answers
		c.recordAnswer(a, cs)
		if a.resp != nil {
			a.resp.Body.Close()
		}
	}
	if done != nil {
		done()
	}
}

// probeAnswer is one peer's answer to a probe (resp nil: none in time).
type probeAnswer struct {
	resp      *http.Response
	i         int  // the peer's index in the candidate set
	cancelled bool // no answer (resp nil) because the probe's context ended first
}

// sendProbes asks the peers of mask, in parallel, whether they hold req's
// page (only-if-cached); each answer's headers must come within the peer
// timeout. It returns where the sent answers arrive.
func (c *Cluster) sendProbes(ctx context.Context, req *http.Request, key string, peers []*Peer, mask uint64) (<-chan probeAnswer, int) {
	answers := make(chan probeAnswer, bits.OnesCount64(mask))
	return answers, c.sendProbesOn(ctx, answers, req, key, peers, mask)
}

// sendProbesOn is sendProbes onto answers, which must have room for every
// answer of mask; it returns how many it sent.
func (c *Cluster) sendProbesOn(ctx context.Context, answers chan<- probeAnswer, req *http.Request, key string, peers []*Peer, mask uint64) int {
	sent := 0
	for m := mask; m != 0; m &= m - 1 {
		i := bits.TrailingZeros64(m)
		sent++
		go func() {
			rctx, rcancel := context.WithCancel(ctx)
			late := time.AfterFunc(c.cfg.PeerTimeout, rcancel)
			out := c.peerRequest(rctx, req, key)
			out.Header.Set("Cache-Control", "only-if-cached")
			out.Header.Set(hdrMode, hopProbe.String())
			out.Header.Set(hdrHop, "1")
			resp, err := c.send(out, peers[i])
			if inTime := late.Stop(); !inTime || err != nil { // no headers in time: lost
				if resp != nil {
					resp.Body.Close()
				}
				rcancel()
				// In time but ended by ctx: the request no longer
				// waited for it (the first hop's, once the request
				// climbed to that peer).
				answers <- probeAnswer{i: i, cancelled: inTime && ctx.Err() != nil}
				return
			}
			resp.Body = &cancelOnClose{ReadCloser: resp.Body, cancel: rcancel}
			answers <- probeAnswer{resp: resp, i: i}
		}()
	}
	return sent
}

// firstHit reads the answers until one is usable (the winner, nil if
// none is), recording each (recordAnswer); got is how many of the sent
// were read. Answers of neg (the negatives racing the climb, nil if none)
// are read meanwhile too: a hit among them that comes while the others are
// still out wins at once, as any probe's first hit always did; neg.left
// counts down as they are read.
//
// The first hop asked beside the probes (cs.firstHopBit) is not waited for
// once every other answer missed: the climb asks it next anyway, and a
// first hop slow to answer would otherwise make the request wait for it
// twice.
func (c *Cluster) firstHit(answers <-chan probeAnswer, sent int, neg *pendingProbes, cs *candidateSet) (win *http.Response, winner string, got int) {
	var negAnswers <-chan probeAnswer
	if neg != nil && neg.left > 0 {
		negAnswers = neg.answers
	}
	others := sent // answers to wait for
	if cs.firstHopBit != 0 {
		others--
	}
	gotOthers := 0
	for gotOthers < others {
		var a probeAnswer
		select {
		case a = <-answers:
			got++
			if !cs.isFirstHop(a.i) {
				gotOthers++
			}
		case a = <-negAnswers:
			if neg.left--; neg.left == 0 {
				negAnswers = nil
			}
		}
		if c.recordAnswer(a, cs) == "hit" {
			return a.resp, cs.ids[a.i], got
		}
		if a.resp != nil {
			a.resp.Body.Close()
		}
	}
	return nil, "", got
}

// recordAnswer classifies one probe answer (hit: the page from the peer's
// store, below 500, not 504, its own Cache-Status member a hit; miss: 504,
// the peer does not hold it; lost: anything else, a 5xx or a refusal of
// the peer's own such as its per-client limit's 429; error: no headers in
// time), counts it, and tells a negatively indicated
// peer's replica what its answer showed. Answers that come after the
// winner are recorded too: a far home's hit comes after a near peer's, and
// leaving it out would teach fna-learned that far negatives miss.
func (c *Cluster) recordAnswer(a probeAnswer, cs *candidateSet) string {
	outcome := "miss"
	switch {
	case a.cancelled:
		outcome = "cancelled"
	case a.resp == nil:
		outcome = "error"
	case a.resp.StatusCode == http.StatusGatewayTimeout:
	case fromStore(a.resp):
		outcome = "hit"
	default:
		outcome = "lost"
	}
	if outcome == "hit" && proxy.AnsweredStaleFromStore(a.resp.Header) {
		// Not a win: a probe never refreshes what it reads (only-if-cached,
		// proxy/handler.go), so a stale copy served from a probe stays stale
		// where it is, for as long as the site lets it be served (its
		// stale-while-revalidate window), and every request that probes gets
		// it. The request climbs instead, and the climb's hop that holds the
		// copy serves it and refreshes it; Squid's siblings answer a stale
		// copy as a miss for the same reason (ICP_MISS). For the estimators
		// it is a miss: asking the peer saved nothing.
		outcome = "stale"
		cs.markStale(a.i)
	}
	if cs.isFirstHop(a.i) {
		if (outcome == "miss" || outcome == "stale") && cs.firstHopNoFresh != nil {
			cs.firstHopNoFresh.Store(true)
		}
		c.metrics.FirstHopProbes.WithLabelValues(outcome).Inc()
		c.races.firstHop.Add(1)
		if outcome == "hit" {
			c.races.firstHopHits.Add(1)
		}
		return outcome
	}
	ind := "negative"
	if cs.indicated[a.i] {
		ind = "positive"
	}
	c.metrics.Probes.WithLabelValues(ind, outcome).Inc()
	if !cs.indicated[a.i] && (outcome == "hit" || outcome == "miss" || outcome == "stale") {
		r := cs.replicas[a.i]
		r.ObserveNegativeProbe(outcome != "hit")
		if nu := cs.derivedNu[a.i]; nu >= 0 {
			r.ObserveHomeNegativeProbe(nu, outcome == "hit")
		}
		c.metrics.NegativeProbes.WithLabelValues(cs.ids[a.i], outcome).Inc()
		p := cs.peers[a.i]
		p.negProbes.Add(1)
		if outcome == "hit" {
			p.negHits.Add(1)
		}
	}
	return outcome
}

// fromStore reports whether a probe's answer is the page from the peer's
// store: below 500 (a 504 is its miss), its own Cache-Status member a hit.
func fromStore(resp *http.Response) bool {
	return resp != nil && resp.StatusCode < 500 && proxy.AnsweredFromStore(resp.Header)
}

// mayAskLocked reports whether p may be probed: trusted and owing no
// purge (purgeowed.go). c.mu is held.
func (c *Cluster) mayAskLocked(p *Peer) bool { return p.trusted && c.owed.owedTo(p.ID) == 0 }

// climb sends the request up the path, hop by hop; a hop that fails (refused,
// timeout, 5xx) is skipped.
//
// At the ingress of a cold page (not a tree path: the home alone), a home that
// is unreachable or left the view since the path was planned is replaced
// by the page's next home in its rendezvous ranking, asked as the home,
// before the origin: every ingress that meets the dead home then converges
// on the same cache, the one that becomes the home once the dead one is
// suspected, so the page costs the origin one fetch, not one per ingress.
// becameHome reports that this node is that next home (it keeps the page).
// Not for a home that answered 5xx (it is alive and relays its origin's
// error: asking again would only load a failing origin), and not along a
// tree or mid-climb, where the next home may be a cache whose own fill for
// the page waits on this one (a wait cycle until the header timeout).
//
// res says who answered (Resp, From, Resumed); its Keep is the caller's.
func (c *Cluster) climb(ctx context.Context, fr proxy.FetchRequest, kh uint64, path []hop, hopCount int, cold bool) (res proxy.Result, becameHome bool, err error) {
	req := fr.Req
	var failed []string
	homeFailed := false
	// fromPeer settles a peer's answer (whole.go); ok false: its body
	// failed before anything was sent, and the climb goes on.
	fromPeer := func(resp *http.Response, id string) (proxy.Result, bool) {
		res, ok := c.settle(ctx, fr, resp, id)
		// The peers tried before it, for the access log.
		res.Retries += len(failed)
		return res, ok
	}

	nextHomeAllowed := cold && hopCount == 0 && len(path) == 1 && path[0].rank == 2
	for i, h := range path {
		p := c.peer(h.id)
		if p == nil || !c.isTrusted(p) {
			failed = append(failed, h.id)
			homeFailed = homeFailed || h.rank == 2
			continue
		}
		rest := make([]string, 0, len(path)-i-1)
		for _, r := range path[i+1:] {
			rest = append(rest, r.id+":"+strconv.Itoa(r.rank))
		}
		resp, ok, unreachable := c.climbTo(ctx, req, fr.Key, p, h.rank, rest, hopCount, fr.Order)
		if ok {
			if res, ok := fromPeer(resp, h.id); ok {
				c.metrics.ClimbHops.WithLabelValues(hopOutcome(res, "ok", "failover")).Inc()
				return res, false, nil
			}
		}
		c.metrics.ClimbHops.WithLabelValues("failover").Inc()
		failed = append(failed, h.id)
		homeFailed = homeFailed || (h.rank == 2 && unreachable)
		if ctx.Err() != nil {
			return proxy.Result{}, false, ctx.Err()
		}
	}
	if homeFailed && nextHomeAllowed {
		switch next := c.nextHome(kh, failed); {
		case next == c.cfg.NodeID:
			becameHome = true
		case next != "":
			if p := c.peer(next); p != nil {
				if resp, ok, _ := c.climbTo(ctx, req, fr.Key, p, 2, nil, hopCount, fr.Order); ok {
					if res, ok := fromPeer(resp, next); ok {
						c.metrics.ClimbHops.WithLabelValues(hopOutcome(res, "next_home", "next_home_failed")).Inc()
						return res, false, nil
					}
				}
				c.metrics.ClimbHops.WithLabelValues("next_home_failed").Inc()
			}
		}
	}
	res, err = c.origin.Fetch(ctx, fr)
	res.Keep = false
	return res, becameHome, err
}

// hopOutcome labels a climb hop whose answer was settled: answered when
// the peer's answer is served, else failed (the origin won a slow answer's
// race, whole.go).
func hopOutcome(res proxy.Result, answered, failed string) string {
	if res.From == proxy.UpstreamPeer {
		return answered
	}
	return failed
}

// climbTo asks peer p, as the page's rank-rank cache with rest of the path
// above it; ok is false (and the answer closed) when it failed, and
// unreachable says it did not answer at all (a 5xx is an answer). order
// is the sending fill's place in the wait order.
func (c *Cluster) climbTo(ctx context.Context, req *http.Request, key string, p *Peer, rank int, rest []string, hopCount int, order proxy.WaitOrder) (resp *http.Response, ok, unreachable bool) {
	out := c.peerRequest(ctx, req, key)
	out.Header.Set(hdrMode, hopClimb.String())
	out.Header.Set(hdrRank, strconv.Itoa(rank))
	out.Header.Set(hdrHop, strconv.Itoa(hopCount+1))
	out.Header.Set(hdrPath, strings.Join(rest, ","))
	out.Header.Set(hdrWait, order.String())
	resp, err := c.send(out, p)
	if err != nil {
		return nil, false, true
	}
	if resp.StatusCode < 500 {
		return resp, true, false
	}
	resp.Body.Close()
	return nil, false, false
}

// nextHome is the page's home once the failed caches are gone: the first
// trusted member of its rendezvous ranking not among them (this node
// included). "" when the placement has no ranking (paper) or nobody is left.
func (c *Cluster) nextHome(kh uint64, failed []string) string {
	if c.cfg.Placement != routing.PlacementDistinct || c.cfg.Mode == routing.ModeRing {
		return ""
	}
	ring := c.router.Ring()
	regions := c.memberRegions()
	for _, i := range ring.Ranking(make([]int32, 0, ring.Len()), kh) {
		id := ring.Member(int(i))
		if slices.Contains(failed, id) || (c.cfg.RegionalHomes && id != c.cfg.NodeID && regions[id] != c.cfg.Region) {
			continue
		}
		if id == c.cfg.NodeID {
			return id
		}
		if p := c.peer(id); p != nil && c.isTrusted(p) {
			return id
		}
	}
	return ""
}

// continueClimb runs the Karger step at this cache (it missed): count the
// request for (page, rank), forward it along the rest of the path, and keep
// a copy when it returns if the count reached q. The home (rank 2) always
// keeps one: it stands in front of the origin.
func (c *Cluster) continueClimb(ctx context.Context, fr proxy.FetchRequest, kh uint64, rt *route) (proxy.Result, error) {
	if rt.mode == hopProbe {
		// only-if-cached already answered a probe miss; never fetch for one.
		return proxy.Result{}, errors.New("cluster: probe reached the fetcher")
	}
	_, keep := c.counters.Observe(kh, rt.rank)
	if rt.rank == 2 {
		keep = true
	}
	path := make([]hop, 0, len(rt.remaining))
	for _, s := range rt.remaining {
		id, rank, _ := strings.Cut(s, ":")
		r, _ := strconv.Atoi(rank)
		if id != "" && id != c.cfg.NodeID {
			path = append(path, hop{id, r})
		}
	}
	res, becameHome, err := c.climb(ctx, fr, kh, path, rt.hop, false)
	if err != nil {
		return proxy.Result{}, err
	}
	res.Keep = keep || becameHome
	return res, nil
}

// keepAtIngress applies the ingress's own q-rule: a page fetched through the
// cluster is kept here once this node has seen q requests for it, so hot
// pages end up at every ingress.
func (c *Cluster) keepAtIngress(kh uint64) bool {
	_, keep := c.ingressQ.Observe(kh, 0)
	return keep
}

func (c *Cluster) recordClimb(site string, d time.Duration) {
	c.mu.Lock()
	c.climbs.record(site, d.Seconds())
	c.mu.Unlock()
	c.metrics.ClimbSeconds.Observe(d.Seconds())
}

func (c *Cluster) peer(id string) *Peer {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.peers[id]
}

func (c *Cluster) isTrusted(p *Peer) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return p.trusted
}

// peerRequest copies a request for a peer: same method, target and Host
// (the cache key depends on them) and headers, no body.
func (c *Cluster) peerRequest(ctx context.Context, req *http.Request, key string) *http.Request {
	out := req.Clone(ctx) // a deep copy, its Header included
	out.RequestURI = ""
	out.Body = http.NoBody
	out.ContentLength = 0
	out.Header.Set(hdrKeyVer, proxy.CacheKeyVersion)
	if c.cfg.SiteOf != nil {
		// The site of the key the answer is stored under, not the host's
		// site now: a fill asked before a reload and sent after it
		// names the site it will store for (a review).
		out.Header.Set(hdrSite, siteField(proxy.KeySite(key)))
	}
	return out
}

// send signs and sends a request to a peer. Until its body is closed the
// request is registered with the peer, so that suspecting the peer acts on
// it: before the headers the climb fails over at once instead of waiting
// for the timeout; mid-body a stream that is silent, or goes silent, for
// suspectedPeerSilence ends (a dead peer sends no more), and one still
// flowing goes on while it moves at suspectedPeerRate (a false suspicion,
// the peer alive: cutting it would cost the client its answer or the
// origin a resume).
// A peer that is trusted, on a lossy link whose TCP retransmits stall the
// stream for seconds, keeps streaming: only peerBodyIdle of total silence
// ends it, for a peer that heartbeats but whose answer hangs.
func (c *Cluster) send(out *http.Request, p *Peer) (*http.Response, error) {
	u := *out.URL
	ctx, cancel := context.WithCancel(out.Context())
	out = out.WithContext(ctx)
	out.URL = &u
	w := &openPeerRequest{cancel: cancel}
	c.mu.Lock()
	u.Scheme, u.Host = c.scheme, p.Addr // Addr changes under c.mu (memberUp)
	c.nextReq++
	id := c.nextReq
	if p.waiting == nil {
		p.waiting = map[uint64]*openPeerRequest{}
	}
	p.waiting[id] = w
	p.routedAt = time.Now() // keeps its link monitored (monitoring.go)
	c.mu.Unlock()
	done := func() {
		c.mu.Lock()
		delete(p.waiting, id)
		w.end()
		c.mu.Unlock()
		cancel()
	}
	resp, err := c.do(out, p.ID)
	if err != nil {
		done()
		return nil, err
	}
	if !sameKeyVersion(resp.Header, true) {
		// A peer of another release keys pages its own way: what it
		// answers may be another request's variant under this one's key.
		resp.Body.Close()
		done()
		c.metrics.PeerRejected.WithLabelValues("answer_key_version").Inc()
		return nil, errOtherKeyVersion
	}
	delete(resp.Header, hdrKeyVer) // the hop's, not the page's: never stored
	body := origin.WithIdleTimeout(resp.Body, c.peerBodyIdle(), done)
	c.mu.Lock()
	w.body = body // (a suspicion before this ended the request: setTrust cancelled it)
	c.mu.Unlock()
	resp.Body = body
	return resp, nil
}

// errOtherKeyVersion is a peer answer keyed under another cache-key
// version (sameKeyVersion).
var errOtherKeyVersion = errors.New("cluster: the peer keys pages under another cache-key version")

// openPeerRequest is a request to a peer, registered with it until its body
// is closed. Its fields change under c.mu.
type openPeerRequest struct {
	cancel context.CancelFunc
	body   origin.IdleBody // set once the header came; nil before
	// While its peer is suspected, grace checks every suspectedPeerGrace
	// that the stream still moves (checkSuspectedStream), from the
	// progress it had at the last check.
	grace      *time.Timer
	lastRead   int64
	lastWaited time.Duration
}

// suspect acts on a request to a peer this node has just suspected:
// before the header it ends (reporting whether it did); mid-body its
// silence may last suspectedPeerSilence from now on, and the stream must
// keep moving at suspectedPeerRate (a suspected peer that trickles a byte
// now and then is never silent). c.mu is held.
func (w *openPeerRequest) suspect(c *Cluster) (ended bool) {
	if w.body == nil {
		w.cancel()
		return true
	}
	w.body.SetLimit(c.suspectedPeerSilence())
	if w.grace == nil {
		w.lastRead, w.lastWaited = w.body.Progress()
		w.grace = time.AfterFunc(c.suspectedPeerGrace(), func() { c.checkSuspectedStream(w) })
	}
	return false
}

// checkSuspectedStream ends a stream from a suspected peer that sent less
// than suspectedPeerRate over the time its reader waited for it since the
// last check, and checks again later otherwise. A reader that did not
// wait for half the grace (a slow client pacing the fill) says nothing of
// the peer, and the stream goes on.
func (c *Cluster) checkSuspectedStream(w *openPeerRequest) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if w.grace == nil {
		return // trusted again, or ended
	}
	read, waited := w.body.Progress()
	dr, dw := read-w.lastRead, waited-w.lastWaited
	w.lastRead, w.lastWaited = read, waited
	if dw >= c.suspectedPeerGrace()/2 && float64(dr) < suspectedPeerRate*dw.Seconds() {
		w.cancel()
		w.grace = nil
		c.metrics.SuspectedPeerRequests.WithLabelValues("crawled").Inc()
		return
	}
	w.grace.Reset(c.suspectedPeerGrace())
}

// trust gives a request to a peer trusted again a trusted peer's limits.
func (w *openPeerRequest) trust(idle time.Duration) {
	if w.body != nil {
		w.body.SetLimit(idle)
	}
	w.end()
}

// end stops what suspect started, when the request ends or the peer is
// trusted again.
func (w *openPeerRequest) end() {
	if w.grace != nil {
		w.grace.Stop()
		w.grace = nil
	}
}

// suspectedPeerSilence is how long a stream from a suspected peer may go
// silent: cluster.peer_timeout, what a slow peer may cost before failover.
// A stream from a live peer on a clean link is never silent that long
// (its bytes are on the wire); from a dead or cut-off one it ends then.
func (c *Cluster) suspectedPeerSilence() time.Duration { return c.cfg.PeerTimeout }

// suspectedPeerGrace is how often a stream from a suspected peer is
// checked for progress: as long as a silent stream waits before it is
// raced against the origin (resumeAfter).
func (c *Cluster) suspectedPeerGrace() time.Duration { return c.resumeAfter() }

// suspectedPeerRate (bytes a second of the reader's waiting) is the
// slowest a suspected peer's stream may go: far below any link a page
// crosses (a falsely suspected peer's answer on the wire goes on, however
// large), far above a trickle that holds a client for hours (a review's
// test: a byte every 400 ms, 128 KiB in 14 hours). A stream cut for it is
// resumed from the origin where it can be. Before 2026-12-04 every stream
// ended at the suspicion.
const suspectedPeerRate = 16 << 10

// peerBodyIdle is how long a trusted peer's answer may go silent mid-body:
// long enough for TCP to ride out a loss burst (retransmission timeouts
// double from 200 ms: 0.2+0.4+0.8+1.6+3.2 s), short enough that a hung
// handler does not hold a client for long. A dead peer's stream ends
// sooner, when it is suspected.
func (c *Cluster) peerBodyIdle() time.Duration {
	return max(4*c.cfg.PeerTimeout, 10*time.Second)
}

// do signs a request to the peer named to, sends it and authenticates the
// response (the body is checked as it is read to the end).
func (c *Cluster) do(req *http.Request, to string) (*http.Response, error) {
	return c.doWith(req, to, c.peerHTTP, c.client)
}

// doWith is do through the given clients, plain and over TLS.
func (c *Cluster) doWith(req *http.Request, to string, plain *peerClient, overTLS *http.Client) (*http.Response, error) {
	sign(c.cfg.Secret, c.cfg.NodeID, to, req)
	var resp *http.Response
	var err error
	if req.URL.Scheme == "http" {
		resp, err = plain.Do(req)
	} else {
		resp, err = overTLS.Do(req) // mutual TLS (cluster.tls): net/http's Transport
	}
	if err != nil {
		return nil, err
	}
	if err := verifyResponse(c.cfg.Secret, req.Header.Get(hdrNonce), resp); err != nil {
		resp.Body.Close()
		c.metrics.PeerRejected.WithLabelValues("response").Inc()
		return nil, err
	}
	return resp, nil
}

// cancelOnClose ends a probe's context when the winning body is closed.
type cancelOnClose struct {
	io.ReadCloser
	cancel context.CancelFunc
	once   sync.Once // cancel is called once, however often Close is (afterAll counts calls)
}

func (c *cancelOnClose) Close() error {
	err := c.ReadCloser.Close()
	c.once.Do(c.cancel)
	return err
}
