package cluster

import (
	"slices"
	"strings"

	"github.com/edgecache/edge/routing"
)

// What a suspicion costs. A suspicion takes the
// peer out of this node's routing view only (its pages go to their next
// home) until its next heartbeat: no other node hears of it. The cost of a
// wrong one is the requests it rerouted, which this file counts: a request
// is rerouted when its page's home over every known member is a peer this
// node suspects. When that peer is heard again from the same process (the
// same incarnation: it had not crashed), the requests rerouted while it was
// suspected were rerouted wrongly (edge_fd_rerouted_requests_wrongly_total);
// a peer that comes back restarted was rightly suspected.
//
// The home over every member needs a ring of them all (members), rebuilt
// only when the member set changes, and a ranking per request only while
// some peer is suspected: nothing is added to a request's path otherwise.

// setMembers rebuilds the all-members ring if the member set changed.
// ids are every known peer's and this node's. Called by setView.
func (c *Cluster) setMembers(ids []string) {
	slices.Sort(ids)
	sig := strings.Join(ids, "\x00")
	c.membersMu.Lock()
	defer c.membersMu.Unlock()
	if sig == c.membersSig {
		return
	}
	members := make([]routing.Member, len(ids))
	for i, id := range ids {
		members[i] = routing.Member{ID: id}
	}
	if err := c.members.SetView(members); err != nil {
		c.log.Error("members view", "err", err)
		return
	}
	c.membersSig = sig
}

// countReroute records that the page with hash kh was routed to home
// although its home over every member is a peer this node suspects (seen
// before and suspected since: a peer never heard is not a suspicion). Call
// only while some peer is suspected (c.suspected > 0). Suspicions are
// local with either monitoring mode (membership is memberlist's), so both
// are counted; the members ring is memberlist's members.
func (c *Cluster) countReroute(kh uint64, home string) {
	ring := c.members.Ring()
	n := ring.Len()
	if n <= 1 {
		return
	}
	var ranking []int32
	if c.cfg.Placement == routing.PlacementDistinct {
		ranking = ring.Ranking(make([]int32, 0, n), kh)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	local := func(id string) bool {
		if id == c.cfg.NodeID {
			return true
		}
		p := c.peers[id]
		return p != nil && p.region == c.cfg.Region
	}
	full := c.pageHome(ring, kh, ranking, local)
	if full == home || full == c.cfg.NodeID {
		return
	}
	if p := c.peers[full]; p != nil && !p.trusted && p.seen {
		p.rerouted++
		p.reroutedAll++
		c.metrics.Rerouted.Inc()
	}
}

// settleReroutes closes the count of p's suspicion as p is trusted again:
// heard from the same process (restarted false), its rerouted requests
// were rerouted wrongly. c.mu must be held.
func (c *Cluster) settleReroutes(p *Peer, restarted bool) {
	if p.rerouted == 0 {
		return
	}
	if !restarted {
		p.reroutedWrongly += p.rerouted
		c.metrics.ReroutedWrongly.Add(float64(p.rerouted))
	}
	p.rerouted = 0
}
