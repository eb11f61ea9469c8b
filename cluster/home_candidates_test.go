package cluster

import (
	"strconv"
	"testing"

	"github.com/edgecache/edge/routing"
)

// TestHomeAwareCandidates: with fna-learned (the default) every trusted
// peer but the climb's first hop is a candidate, negatively indicated ones
// included; a page's home in each region is marked as such (the home of
// the other region is the peer a negative probe is worth sending to), and
// a negatively indicated peer that is neither a home nor on the path is
// priced ν = 1, so it is never chosen. pageHomes names one home per
// region, the first member of the page's ranking there.
func TestHomeAwareCandidates(t *testing.T) {
	c, members, regionOf := newRegionalCluster(t, 8)
	c.cfg.Selection = SelectionFNALearned
	c.mu.Lock()
	for _, p := range c.peers {
		p.trusted, p.member = true, true
	}
	c.mu.Unlock()
	if err := c.router.SetView(members); err != nil {
		t.Fatal(err)
	}
	ring := c.router.Ring()
	for pg := range 50 {
		key := "http://h/p/" + strconv.Itoa(pg)
		kh := routing.KeyHash(key)
		want := map[string]bool{}
		for _, i := range ring.Ranking(nil, kh) {
			id := ring.Member(int(i))
			r := regionOf(id)
			if !want["region:"+r] {
				want["region:"+r], want[id] = true, true
			}
		}
		homes := c.pageHomes(kh)
		if len(homes) != 2 {
			t.Fatalf("page %d: homes %v, want one per region", pg, homes)
		}
		for id := range homes {
			if !want[id] {
				t.Fatalf("page %d: %s is not the first of its region in the ranking (%v)", pg, id, want)
			}
		}
		path, _, _ := c.planFor(kh, false, func(n int) int { return n - 1 })
		cs := c.candidates(key, "s", path, false)
		if got, wantN := len(cs.peers), len(members)-1-len(path); got != wantN {
			t.Fatalf("page %d: %d candidates, want every peer but the first hop (%d)", pg, got, wantN)
		}
		for i, p := range cs.peers {
			if cs.home[i] != homes[p.ID] {
				t.Fatalf("page %d: %s home=%v, pageHomes says %v", pg, p.ID, cs.home[i], homes[p.ID])
			}
			// Nothing was advertised: every indication is negative.
			if cs.indicated[i] || cs.negative&(1<<uint(i)) == 0 {
				t.Fatalf("page %d: %s indicated with no advertisement", pg, p.ID)
			}
			if !cs.home[i] && !cs.onPath[i] && cs.cands[i].Rho != 1 {
				t.Fatalf("page %d: %s is neither home nor on the path, ρ %v, want 1", pg, p.ID, cs.cands[i].Rho)
			}
			if cs.home[i] && cs.derivedNu[i] < 0 {
				t.Fatalf("page %d: home %s has no derived ν to learn from", pg, p.ID)
			}
		}
		// A real request leaves out the peers that cannot be chosen
		// (ρ = 1), so that they never take the place of one that can.
		for _, cand := range c.candidates(key, "s", path, true).cands {
			if cand.Rho >= 1 {
				t.Fatalf("page %d: a request's candidate set holds a peer with ρ = 1", pg)
			}
		}
	}
}

// TestPeersLearnTogether: a node's replicas of one region's peers share a
// calibration pool, so a peer of that region no negative probe has gone to
// yet starts from what the others' negatives showed; a peer of another
// region does not; a replica replaced at its peer's restart joins its
// region's pool; and a peer that reports another region moves to that
// region's pool. (Live, learning it afresh per peer cost each peer its own
// round of probes that missed: docs/cluster.md.)
func TestPeersLearnTogether(t *testing.T) {
	c, _, regionOf := newRegionalCluster(t, 6)
	c.mu.Lock()
	byRegion := map[string][]*Peer{}
	for _, p := range c.peers {
		c.setRegion(p, regionOf(p.ID))
		byRegion[p.region] = append(byRegion[p.region], p)
	}
	c.mu.Unlock()
	if len(byRegion) != 2 {
		t.Fatalf("regions %v, want two", byRegion)
	}
	var here, there []*Peer
	for _, ps := range byRegion {
		if len(ps) >= 2 && here == nil {
			here = ps
		} else {
			there = ps
		}
	}
	if len(here) < 2 || len(there) < 1 {
		t.Fatalf("peers per region: %d and %d", len(here), len(there))
	}
	for range 500 {
		here[0].replica.ObserveHomeNegativeProbe(0.2, false) // promised 80 % hits, none came
	}
	if k := here[1].replica.Calibration(); k > 0.1 {
		t.Fatalf("a peer of the same region with no probes of its own: κ %v, want the pool's (near 0)", k)
	}
	if k := there[0].replica.Calibration(); k != 1 {
		t.Fatalf("a peer of another region: κ %v, want 1 (its region's negatives are its own)", k)
	}
	if k := c.ProbeRaces().Pooled[here[0].region]; k > 0.1 {
		t.Fatalf("status page's pooled κ %v, want near 0", k)
	}
	c.mu.Lock()
	replaced := c.newReplica(here[0].region)
	c.setRegion(there[0], here[0].region)
	c.mu.Unlock()
	if k := replaced.Calibration(); k > 0.1 {
		t.Fatalf("a replaced replica: κ %v, want its region's pool's", k)
	}
	if k := there[0].replica.Calibration(); k > 0.1 {
		t.Fatalf("a peer that moved region: κ %v, want its new region's pool's", k)
	}
}
