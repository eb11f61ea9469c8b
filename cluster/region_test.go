package cluster

import (
	"testing"
	"time"
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
		p.trusted = true
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
	cn, _ := c.costs(near, 0.001)
	cf, _ := c.costs(far, 0.001)
	if cn != 1 || cf != 20 {
		t.Fatalf("normalised costs near %v far %v, want 1 and 20", cn, cf)
	}
}
