package cluster

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/edgecache/edge/routing"
)

// TestRegionCosts: a peer in a priced region pair costs the configured
// amount as c_j, others their measured RTT, all normalised to the cheapest
// trusted peer; a region arrives with the peer's heartbeat.
func TestRegionCosts(t *testing.T) {
	c := newTestCluster(t, "hybrid", map[string]string{"near": "127.0.0.1:1", "far": "127.0.0.1:2", "unpriced": "127.0.0.1:3"})
	c.cfg.Region = "eu"
	c.cfg.RegionCosts = map[[2]string]time.Duration{RegionPair("us", "eu"): 20 * time.Millisecond}
	c.mu.Lock()
	defer c.mu.Unlock()
	for id, p := range c.peers {
		p.trusted, p.member = true, true
		p.rtt = 0.001 // 1 ms measured for everyone
		switch id {
		case "near":
			p.region = "eu"
		case "far":
			p.region = "us"
		}
	}
	near, far, unpriced := c.peers["near"], c.peers["far"], c.peers["unpriced"]
	if got := c.accessCost(far); got != 0.020 {
		t.Fatalf("far access cost %v s, want the configured 0.020", got)
	}
	if got := c.accessCost(near); got != 0.001 {
		t.Fatalf("near (same region, unpriced pair) access cost %v s, want its RTT", got)
	}
	if got := c.accessCost(unpriced); got != 0.001 {
		t.Fatalf("peer without a region: %v s, want its RTT", got)
	}
	cn := c.costs(near, 0.001)
	cf := c.costs(far, 0.001)
	if cn != 1 || cf != 20 {
		t.Fatalf("normalised costs near %v far %v, want 1 and 20", cn, cf)
	}
}

// TestRegionalHomes: with routing.home=region a page's home is the first
// member of its rendezvous ranking in this node's region, no plan (cold or
// hot) leaves the region, and the next home for a failed one stays in the
// region too. Without it, about half the homes are in the other region.
func TestRegionalHomes(t *testing.T) {
	c, members, regionOf := newRegionalCluster(t, 12)
	if err := c.router.SetView(members); err != nil {
		t.Fatal(err)
	}
	ring := c.router.Ring()
	for p := range 100 {
		kh := routing.KeyHash("http://h/p/" + strconv.Itoa(p))
		want := ""
		for _, i := range ring.Ranking(nil, kh) {
			if id := ring.Member(int(i)); regionOf(id) == "eu" {
				want = id
				break
			}
		}
		for _, hot := range []bool{false, true} {
			path, home, _ := c.planFor(kh, hot, func(n int) int { return n - 1 })
			if home != want {
				t.Fatalf("page %d: home %s, want %s (the first eu member of its ranking)", p, home, want)
			}
			for _, h := range path {
				if regionOf(h.id) != "eu" {
					t.Fatalf("page %d hot=%v: path %v leaves the region", p, hot, path)
				}
			}
		}
		if want == "n0" {
			continue
		}
		next := c.nextHome(kh, []string{want})
		if next == want || regionOf(next) != "eu" {
			t.Fatalf("page %d: next home after %s is %s, want another eu member", p, want, next)
		}
	}
}

// newRegionalCluster is node n0 of an n-node view in two regions (n0, n2,
// n4, … in eu; odd ones in us) with routing.home=region and distinct
// placement, every peer's region known; regionOf names a member's region.
func newRegionalCluster(t *testing.T, n int) (c *Cluster, members []routing.Member, regionOf func(string) string) {
	t.Helper()
	peers := map[string]string{}
	members = []routing.Member{{ID: "n0"}}
	for i := 1; i < n; i++ {
		id := "n" + strconv.Itoa(i)
		peers[id] = "127.0.0.1:1"
		members = append(members, routing.Member{ID: id})
	}
	regionOf = func(id string) string {
		k, _ := strconv.Atoi(strings.TrimPrefix(id, "n"))
		return map[bool]string{true: "eu", false: "us"}[k%2 == 0]
	}
	c = newTestClusterPlaced(t, "hybrid", peers, routing.PlacementDistinct)
	c.cfg.Region, c.cfg.RegionalHomes = "eu", true
	c.mu.Lock()
	for id, p := range c.peers {
		c.setRegion(p, regionOf(id))
	}
	c.mu.Unlock()
	return c, members, regionOf
}
