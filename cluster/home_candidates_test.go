package cluster

import (
	"fmt"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/edgecache/edge/cluster/wire"

	"github.com/edgecache/edge/routing"
)

// TestHomeAwareCandidates: with fna-learned every trusted
// peer but the climb's first hop is a candidate, negatively indicated ones
// included; a page's home in each region is marked as such (the home of
// the other region is the peer a negative probe is worth sending to), and
// a negatively indicated peer that is neither a home nor on the path is
// priced ν = 1, so it is never chosen. pageHomes names one home per
// region, the first member of the page's ranking there.
func TestHomeAwareCandidates(t *testing.T) {
	c, members, regionOf := newTrustedRegionalCluster(t, 8)
	c.cfg.Selection = SelectionFNALearned
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
// region does not; a peer that restarts (a heartbeat of a new
// incarnation) gets a replica whose pool no longer holds the old process's
// outcomes; and a peer that reports another region moves to that region's
// pool. (Live, learning it afresh per peer cost each peer its own round of
// probes that missed: docs/cluster.md.)
func TestPeersLearnTogether(t *testing.T) {
	c, _, regionOf := newRegionalCluster(t, 6) // eu: n2, n4; us: n1, n3, n5
	peer := func(id string) *Peer {
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.peers[id]
	}
	hb := func(id string, inc, seq uint64, region string) {
		c.received(wire.Received{Heartbeat: wire.Heartbeat{Node: id, Incarnation: inc, Seq: seq, Region: region}, RecvNs: time.Now().UnixNano()})
	}
	if regionOf("n2") != "eu" || regionOf("n4") != "eu" || regionOf("n1") != "us" {
		t.Fatal("layout")
	}
	for _, id := range []string{"n1", "n2", "n3", "n4", "n5"} {
		hb(id, 1, 1, regionOf(id))
	}
	for range 500 {
		peer("n2").replica.ObserveHomeNegativeProbe(0.2, false) // promised 80 % hits, none came
	}
	if k := peer("n4").replica.Calibration(); k > 0.1 {
		t.Fatalf("a peer of the same region with no probes of its own: κ %v, want the pool's (near 0)", k)
	}
	if k := peer("n1").replica.Calibration(); k != 1 {
		t.Fatalf("a peer of another region: κ %v, want 1 (its region's negatives are its own)", k)
	}
	c.cfg.Selection = SelectionFNALearned
	if k, ok := c.ProbeRaces().Pooled["eu"]; !ok || k > 0.1 {
		t.Fatalf("status page's pooled κ %v (shown: %v), want near 0", k, ok)
	}
	// n2 restarts: its new replica starts afresh, and n4 no longer borrows
	// the old process's outcomes.
	hb("n2", 2, 1, "eu")
	if k := peer("n2").replica.Calibration(); k != 1 {
		t.Fatalf("the restarted peer's κ %v, want 1", k)
	}
	if k := peer("n4").replica.Calibration(); k != 1 {
		t.Fatalf("after n2's restart n4's κ %v, want 1 (the old process's outcomes left with its replica)", k)
	}
	// n4's own outcomes, then n1 moves to eu and starts from them.
	for range 500 {
		peer("n4").replica.ObserveHomeNegativeProbe(0.2, false)
	}
	hb("n1", 1, 2, "eu")
	if k := peer("n1").replica.Calibration(); k > 0.1 {
		t.Fatalf("a peer that moved to eu: κ %v, want eu's pool's", k)
	}
}

// TestPeerRegionsBounded: a heartbeat's region becomes a pool and a metric
// label, so one that is not a region label is ignored (found by review:
// bytes that are not UTF-8 made the gauge export panic with c.mu held),
// and the pools of regions no peer is in any more go, with their series.
func TestPeerRegionsBounded(t *testing.T) {
	c, _, _ := newRegionalCluster(t, 4)
	for i := range 1000 {
		c.received(wire.Received{Heartbeat: wire.Heartbeat{Node: "n1", Incarnation: 1, Seq: uint64(i + 1), Region: fmt.Sprintf("r%d", i)}, RecvNs: time.Now().UnixNano()})
	}
	c.received(wire.Received{Heartbeat: wire.Heartbeat{Node: "n1", Incarnation: 1, Seq: 5000, Region: "\xff\xfe"}, RecvNs: time.Now().UnixNano()})
	c.mu.Lock()
	defer c.mu.Unlock()
	if r := c.peers["n1"].region; r != "r999" {
		t.Fatalf("n1's region %q, want the last valid one, r999", r)
	}
	c.exportPools()
	if n := len(c.calPools); n > 3 {
		t.Fatalf("%d pools after one peer changed its region 1,000 times, want one per region in use", n)
	}
	ch := make(chan prometheus.Metric, 100)
	c.metrics.PooledCalibration.Collect(ch)
	close(ch)
	if n := len(ch); n > 3 {
		t.Fatalf("%d pooled-calibration series, want one per region in use", n)
	}
}

// TestDepartedMemberLeavesThePool: a member memberlist agrees is gone
// takes its calibration share out of its region's pool (found by review:
// a departed peer is never asked again, so its share never aged and held
// the survivors' prior for good), and brings it back when it returns.
func TestDepartedMemberLeavesThePool(t *testing.T) {
	c, _, _ := newRegionalCluster(t, 6) // eu: n2, n4
	meta := nodeMeta{Region: "eu", Incarnation: 1, Epoch: 1}.encode()
	node := func(id string) *memberlist.Node {
		return &memberlist.Node{Name: id, Addr: net.ParseIP("127.0.0.1"), Port: 1, Meta: meta}
	}
	c.memberUp(node("n2"), "join")
	c.memberUp(node("n4"), "join")
	c.mu.Lock()
	n2, n4 := c.peers["n2"], c.peers["n4"]
	c.mu.Unlock()
	for range 500 {
		n2.replica.ObserveHomeNegativeProbe(0.2, false)
	}
	if k := n4.replica.Calibration(); k > 0.1 {
		t.Fatalf("n4's κ %v while n2 is a member, want n2's (near 0)", k)
	}
	c.memberDown(node("n2"))
	if k := n4.replica.Calibration(); k != 1 {
		t.Fatalf("n4's κ %v after n2 left, want 1", k)
	}
	c.memberUp(node("n2"), "join")
	if k := n4.replica.Calibration(); k > 0.1 {
		t.Fatalf("n4's κ %v after n2 came back (same process), want n2's again", k)
	}
}

// TestFNARateKeepsAndExploresHomeNegatives: with fna-rate a negatively
// indicated home stays in a request's candidate set even when priced
// ν = 1 (its outcomes, not the derived ν, decide; it can only be learnt
// if it can be asked), and explore picks at most one such home per
// request, never one already chosen, only with fna-rate, with about
// indicators.ExploreChance per request that has one.
func TestFNARateKeepsAndExploresHomeNegatives(t *testing.T) {
	c, _, _ := newTrustedRegionalCluster(t, 8)
	explored, chances := 0, 0
	for _, sel := range []Selection{SelectionFNALearned, SelectionFNARate} {
		c.cfg.Selection = sel
		for pg := range 200 {
			key := "http://h/p/" + strconv.Itoa(pg)
			kh := routing.KeyHash(key)
			path, _, _ := c.planFor(kh, false, func(n int) int { return n - 1 })
			cs := c.candidates(key, "s", path, true)
			negativeHomes := uint64(0)
			for i := range cs.peers {
				if cs.home[i] && !cs.indicated[i] {
					negativeHomes |= 1 << uint(i)
				}
				if sel == SelectionFNALearned && cs.cands[i].Rho >= 1 {
					t.Fatalf("fna-learned: a request's candidate set holds a peer with ρ = 1")
				}
				if sel == SelectionFNARate && cs.cands[i].Rho >= 1 && !cs.home[i] {
					t.Fatalf("fna-rate: %s, not a home, with ρ = 1 in a request's candidate set", cs.ids[i])
				}
			}
			if sel == SelectionFNARate && negativeHomes == 0 {
				t.Fatalf("page %d: no negatively indicated home kept (path %v)", pg, path)
			}
			for range 50 {
				chosen := uint64(0)
				if negativeHomes != 0 && pg%2 == 0 {
					chosen = negativeHomes & -negativeHomes // one home already chosen
				}
				m := c.explore(&cs, chosen)
				if sel != SelectionFNARate && m != 0 {
					t.Fatalf("%v explored %b", sel, m)
				}
				if m&(m-1) != 0 || m&^negativeHomes != 0 || m&chosen != 0 {
					t.Fatalf("explored %b: want at most one negatively indicated home (%b) not already chosen (%b)", m, negativeHomes, chosen)
				}
				if sel == SelectionFNARate && negativeHomes&^chosen != 0 {
					chances++
					if m != 0 {
						explored++
					}
				}
			}
		}
	}
	t.Logf("explored %d of %d chances", explored, chances)
	if explored == 0 || float64(explored) > 0.03*float64(chances) {
		t.Fatalf("explored %d of %d chances, want some and at most about 2 %%", explored, chances)
	}
}

// newTrustedRegionalCluster is newRegionalCluster with every peer a
// trusted member and the router's view set to all of them.
func newTrustedRegionalCluster(t *testing.T, n int) (*Cluster, []routing.Member, func(string) string) {
	t.Helper()
	c, members, regionOf := newRegionalCluster(t, n)
	c.mu.Lock()
	for _, p := range c.peers {
		p.trusted, p.member = true, true
	}
	c.mu.Unlock()
	if err := c.router.SetView(members); err != nil {
		t.Fatal(err)
	}
	return c, members, regionOf
}
