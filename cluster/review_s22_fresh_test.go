package cluster

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// HOLDS: a partition longer than gossipToTheDead (both sides forget each
// other in memberlist) heals through the seeds loop even for members the
// other side knows only through a third party (p02 and p03 are configured
// with p00 alone; p01 learns them by push/pull), and a node joining 29 s
// after its seed's last refresh (members' metadata nearly metaRefresh old)
// is taken with every member. freshAlive refuses nothing legitimate here.
// Virtual time: add TestS22LongPartitionHealsThroughTheSeedsAndThirdParties
// to the Makefile's VIRTUAL_TIME_TESTS.
func TestS22LongPartitionHealsThroughTheSeedsAndThirdParties(t *testing.T) {
	virtualTime(t, func(t *testing.T) {
		network := networkOf(t)
		all := func(c *Config) { c.Monitoring = MonitorAll }
		ids := []string{"p00", "p01", "p02", "p03"}
		conns := map[string]string{}
		nodes := map[string]*gossipNode{}
		defer func() { stopAll(nodes) }()
		for _, id := range ids {
			conn := listenUDP(t, "127.0.0.1:0")
			conns[id] = conn.LocalAddr().String()
			seeds := map[string]string{"p00": conns["p00"]}
			if id == "p01" {
				seeds["p01"] = conns["p01"]
			}
			if id == "p00" {
				seeds = map[string]string{"p00": conns["p00"]}
			}
			nodes[id] = startGossipNode(t, id, seeds, conn, 2, all)
		}
		eventually(t, 60*time.Second, "every node a member of every other", func() bool {
			for _, a := range ids {
				for _, b := range ids {
					if a != b && !nodes[a].member(b) {
						return false
					}
				}
			}
			return true
		})
		left, right := []string{"p00", "p01"}, []string{"p02", "p03"}
		for _, a := range left {
			for _, b := range right {
				network.Cut(conns[a], conns[b])
				network.Cut(conns[b], conns[a])
			}
		}
		time.Sleep(2*gossipToTheDead + 10*time.Second) // both sides forget the other
		for _, a := range left {
			for _, b := range right {
				if _, ok := nodes[a].c.mlView.snapshot()[b]; ok {
					t.Fatalf("%s still has %s in its view after the cut", a, b)
				}
			}
		}
		for _, a := range left {
			for _, b := range right {
				network.Heal(conns[a], conns[b])
				network.Heal(conns[b], conns[a])
			}
		}
		healed := eventually(t, 60*time.Second, "every node a member of and trusting every other after the heal", func() bool {
			for _, a := range ids {
				for _, b := range ids {
					if a != b && (!nodes[a].member(b) || !nodes[a].trusts(b)) {
						return false
					}
				}
			}
			return true
		})
		t.Logf("healed in %v of virtual time", healed)
		// A joiner whose seed's copies of the members are nearly metaRefresh old.
		time.Sleep(metaRefresh - 2*time.Second)
		conn := listenUDP(t, "127.0.0.1:0")
		nodes["p04"] = startGossipNode(t, "p04", map[string]string{"p01": conns["p01"]}, conn, 2, all)
		eventually(t, 30*time.Second, "p04 has every member", func() bool {
			for _, b := range ids {
				if !nodes["p04"].member(b) {
					return false
				}
			}
			return true
		})
		for id, nd := range nodes {
			if n := testutil.ToFloat64(nd.c.metrics.GossipRejected.WithLabelValues("stale")); n > 0 {
				t.Errorf("%s refused %v announcements as stale; log:\n%s", id, n, grepLines(nd.log.String(), "stale"))
			}
		}
	})
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
