package cluster

import (
	"fmt"
	"math/bits"
	"net/url"

	"github.com/edgecache/edge/proxy"
	"github.com/edgecache/edge/routing"
)

// Explanation shows how this node would route a URL now: its key, home,
// path (cold and hot) and the probe selection with its numbers.
type Explanation struct {
	URL         string          `json:"url"`
	Key         string          `json:"key"`
	KeyHash     string          `json:"key_hash"`
	Mode        string          `json:"mode"`
	Placement   string          `json:"placement"`
	View        []string        `json:"view"`
	Home        string          `json:"home"`
	Requests    int             `json:"misses_planned_here"`
	Hot         bool            `json:"hot"`
	ColdPath    []string        `json:"cold_path"`
	HotPath     []string        `json:"hot_path_from_last_leaf"`
	Site        string          `json:"site"`            // whose M prices the misses (per-site penalty)
	MissPenalty float64         `json:"miss_penalty"`    // M in the unit of c_j
	ClimbMs     float64         `json:"miss_penalty_ms"` // the site's measured climb latency M comes from (0: none yet)
	Candidates  []CandidateInfo `json:"candidates"`
	Policy      string          `json:"policy"`
	// FirstHopWithProbes is the climb's first hop when it would be asked
	// beside the chosen probes (cluster.first_hop_with_probes), else "".
	FirstHopWithProbes string `json:"first_hop_with_probes,omitempty"`
}

// CandidateInfo is one peer considered for a probe.
type CandidateInfo struct {
	Peer      string  `json:"peer"`
	Region    string  `json:"region,omitempty"`
	RTTms     float64 `json:"rtt_ms"`
	AccessMs  float64 `json:"access_cost_ms"` // before normalisation: the region pair's configured cost, else the RTT
	OnPath    bool    `json:"on_path"`
	Indicated bool    `json:"indicated"`
	Home      bool    `json:"home"` // a home of the page (home-aware policies keep its own estimates)
	Cost      float64 `json:"cost"`
	Rho       float64 `json:"rho"`
	Chosen    bool    `json:"chosen"`
}

// Explain describes the route of rawURL without sending anything. keyOf
// is the proxy's key rule (scheme, query order, site: proxy.URLKey); nil
// is the bare proxy.CacheKey.
func (c *Cluster) Explain(rawURL string, keyOf func(*url.URL) string) (Explanation, error) {
	u, err := url.Parse(rawURL)
	if err != nil || u.Host == "" {
		return Explanation{}, fmt.Errorf("cluster: %q is not an absolute URL", rawURL)
	}
	key := proxy.CacheKey(proxy.KeyScheme(u.Scheme, c.cfg.KeyScheme), u.Host, u.EscapedPath(), u.RawQuery)
	if keyOf != nil {
		key = keyOf(u)
	}
	kh := routing.KeyHash(key)
	ring := c.router.Ring()
	e := Explanation{URL: rawURL, Key: key, KeyHash: fmt.Sprintf("%016x", kh), Mode: c.cfg.Mode.String(), View: ring.Members(), Policy: c.cfg.Selection.String()}
	e.Placement = c.cfg.Placement.String()
	e.Requests, _ = c.hot.Peek(kh, 0)
	e.Hot = e.Requests >= c.cfg.HotThreshold
	names := func(hs []hop) []string {
		out := make([]string, 0, len(hs))
		for _, h := range hs {
			out = append(out, fmt.Sprintf("%s (rank %d)", h.id, h.rank))
		}
		return out
	}
	lastLeaf := func(n int) int { return n - 1 }
	cold, home, _ := c.planFor(kh, false, lastLeaf)
	hot, _, _ := c.planFor(kh, true, lastLeaf)
	e.Home, e.ColdPath, e.HotPath = home, names(cold), names(hot)
	path := hot
	if !e.Hot {
		path = cold
	}
	e.Site = c.siteOf(u.Host)
	cs := c.candidates(key, e.Site, path, false)
	e.MissPenalty, e.ClimbMs = cs.missPenalty, cs.climbS*1000
	c.mu.Lock()
	for i, p := range cs.peers {
		e.Candidates = append(e.Candidates, CandidateInfo{Peer: p.ID, Region: p.region, RTTms: p.rtt * 1000, AccessMs: c.accessCost(p) * 1000,
			OnPath: cs.onPath[i], Indicated: cs.indicated[i], Home: cs.home[i], Cost: cs.cands[i].Cost, Rho: cs.cands[i].Rho})
	}
	c.mu.Unlock()
	if c.cfg.Selection != SelectionOff && len(cs.cands) > 0 {
		mask := c.choose(&cs)
		for m := mask; m != 0; m &= m - 1 {
			e.Candidates[bits.TrailingZeros64(m)].Chosen = true
		}
		if waitFor, _ := c.splitProbes(&cs, mask); waitFor != 0 && cs.withFirstHop() != 0 {
			e.FirstHopWithProbes = cs.firstHop.ID
		}
	}
	return e, nil
}
