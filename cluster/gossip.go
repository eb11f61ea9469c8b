package cluster

// Bounded-subset monitoring (docs/cluster.md, "Overheads as the cluster
// grows"). All-to-all heartbeats cost every node 10 × (n − 1) packets a
// second; measured, their CPU passes 5 % of a core per node at about 26
// nodes. Above that each node exchanges heartbeats with a few neighbours
// only, runs its failure detector on those links, and spreads what it
// learns as rumors piggybacked on the same heartbeats, as SWIM does:
//
//   - Neighbours: the union of ⌈k/2⌉ random rings over the member ids, each
//     node linked to its successor and predecessor on every ring. The graph
//     is symmetric (so RTT echoes and indicator epochs flow both ways), every
//     node has at most k neighbours and so at most k monitors, and a union of
//     random rings has a diameter of about log n, so rumors spread in a few
//     hops. Every node computes the same graph from the same member list,
//     with no coordination. Members are the configured (or DNS-identified)
//     peers, trusted or not, so a dead neighbour stays monitored and is
//     noticed when it comes back.
//   - Liveness points: a node is alive or suspected at (incarnation,
//     version). A later point wins; at the same point a suspicion wins, and
//     only the node itself can move past it, by raising its version (a
//     refutation). A restart is a new incarnation and wins over everything
//     before it.
//   - Suspicion: a neighbour whose detector passes its freshness point is
//     suspected at its current point, once; it may be suspected again only
//     after this node hears it directly again. So a link that is broken one
//     way costs one suspicion and one refutation, not a flapping loop.
//   - Dissemination: each new point is sent with the next λ⌈log₂(n+1)⌉
//     heartbeats (λ = 3, SWIM's), freshest first, and two slots of every
//     heartbeat carry the whole table round-robin (anti-entropy), so a node
//     that joins late or lost a packet still converges.
//
// Not built from SWIM/Lifeguard: indirect probes (a suspicion here is one
// monitor's opinion until refuted) and Lifeguard's suspicion timeouts that
// shrink with independent confirmations. A node is removed from the routing
// view as soon as it is suspected, as with all-to-all; the ring's failover
// covers a false suspicion, which costs a few requests their first hop.

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/edgecache/edge/cluster/wire"
	"github.com/edgecache/edge/indicators"
)

// Monitoring says which peers a node exchanges heartbeats with.
type Monitoring int

const (
	// MonitorAuto is all-to-all up to AutoSubsetAbove members, subset above.
	MonitorAuto Monitoring = iota
	// MonitorAll: every node heartbeats every other (detection in one hop).
	MonitorAll
	// MonitorSubset: bounded neighbours and gossiped suspicions.
	MonitorSubset
)

// AutoSubsetAbove is the member count (self included) above which auto
// switches to subset monitoring: all-to-all heartbeat CPU passes 5 % of a
// core per node at 26 nodes on the development machine (edge sim cluster
// --budget 0.05, fed by scripts/clusteroverhead), and below about 24 the
// one-hop detection of all-to-all is worth its cost.
const AutoSubsetAbove = 24

// DefaultMonitorPeers is k, the neighbours per node in subset mode: with
// k = 8 a rumor reaches 1,000 nodes in about 4 hops, a node has 8 monitors
// (it takes 8 broken links to hide a failure), and its heartbeats cost 80
// packets a second at 100 ms, what all-to-all costs at 9 nodes.
const DefaultMonitorPeers = 8

// antiEntropySlots are the rumor slots of every heartbeat given to the
// round-robin walk of the whole table rather than to fresh news.
const antiEntropySlots = 2

// ParseMonitoring parses cluster.monitoring.
func ParseMonitoring(s string) (Monitoring, error) {
	switch s {
	case "auto", "":
		return MonitorAuto, nil
	case "all":
		return MonitorAll, nil
	case "subset":
		return MonitorSubset, nil
	}
	return 0, fmt.Errorf("unknown monitoring %q (want auto, all or subset)", s)
}

func (m Monitoring) String() string {
	return [...]string{"auto", "all", "subset"}[m]
}

// liveness is the newest point known for a node.
type liveness struct {
	known   bool
	inc     uint64
	ver     uint64
	suspect bool
}

// after reports whether a supersedes b.
func (a liveness) after(b liveness) bool {
	switch {
	case !b.known:
		return a.known
	case a.inc != b.inc:
		return a.inc > b.inc
	case a.ver != b.ver:
		return a.ver > b.ver
	}
	return a.suspect && !b.suspect
}

func (a liveness) rumor(node string) wire.Rumor {
	return wire.Rumor{Node: node, Incarnation: a.inc, Ver: a.ver, Suspect: a.suspect}
}

func rumorKind(suspect bool) string {
	if suspect {
		return "suspect"
	}
	return "alive"
}

// neighbours returns the ids linked to self on k/2 rings (at least one)
// over members (self included): its successor and predecessor on each, so
// at most k.
func neighbours(self string, members []string, k int) map[string]bool {
	out := map[string]bool{}
	if len(members) < 2 {
		return out
	}
	type ranked struct {
		h  uint64
		id string
	}
	ring := make([]ranked, len(members))
	for r := range max(1, k/2) { // two neighbours per ring: never more than k
		for i, id := range members {
			ring[i] = ranked{ringHash(r, id), id}
		}
		slices.SortFunc(ring, func(a, b ranked) int {
			if a.h != b.h {
				if a.h < b.h {
					return -1
				}
				return 1
			}
			return strings.Compare(a.id, b.id)
		})
		at := slices.IndexFunc(ring, func(x ranked) bool { return x.id == self })
		if at < 0 {
			return out
		}
		n := len(ring)
		for _, j := range []int{(at + 1) % n, (at + n - 1) % n} {
			if ring[j].id != self {
				out[ring[j].id] = true
			}
		}
	}
	return out
}

// ringHash places id on ring r. Every node must compute the same value, so
// it is a fixed function, not a seeded map hash; and the rings must be
// independent even for ids that differ in one character, which FNV's
// output is not (measured: a 200-node graph had diameter 10 with FNV-1a
// against 4 with SHA-256). It runs only on membership changes.
func ringHash(r int, id string) uint64 {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], uint64(r))
	sum := sha256.Sum256(append(b[:], id...))
	return binary.BigEndian.Uint64(sum[:8])
}

// identified reports whether p is known by its node id (always, with
// static peers; with DNS, once its first heartbeat named it).
func (c *Cluster) identified(p *Peer) bool {
	return c.cfg.DNS == "" || p.ID != p.Addr || p.seen
}

// recomputeNeighbours decides the monitoring mode for the current members
// and marks the peers this node heartbeats. c.mu must be held.
//
// The rings are built over the eligible members (eligible): a member
// suspected for longer than deadAfter leaves them, so departed pods and
// long-dead nodes do not keep neighbour slots that would leave a live node
// watched by nobody. A node that comes back is noticed because it
// heartbeats its own neighbours, and recent senders are answered (targets).
func (c *Cluster) recomputeNeighbours() {
	now := time.Now()
	members := []string{c.cfg.NodeID}
	eligible := []string{c.cfg.NodeID}
	for _, p := range c.peers {
		if !c.identified(p) {
			continue
		}
		members = append(members, p.ID)
		if c.eligible(p, now) {
			eligible = append(eligible, p.ID)
		}
	}
	slices.Sort(members)
	c.order = members
	c.ringSig = c.ringSignature(now)
	wasSubset := c.subset
	// Regional homes keep all-to-all: a peer's region travels only in its
	// own heartbeats, and with neighbours only, ingresses in one region
	// would place homes over different sets of known members.
	autoAbove := AutoSubsetAbove
	if c.cfg.AutoSubsetAbove > 0 {
		autoAbove = c.cfg.AutoSubsetAbove
	}
	c.subset = c.cfg.Monitoring == MonitorSubset || (c.cfg.Monitoring == MonitorAuto && len(members) > autoAbove && !c.cfg.RegionalHomes)
	if c.subset && !wasSubset {
		// All-to-all distrusted a peer without a suspicion anyone else
		// knows of, and subset mode trusts by liveness points: make the
		// distrust a suspicion, spread it, and let a live peer refute it.
		for _, p := range c.peers {
			if c.identified(p) && !p.trusted && p.live.known && !p.live.suspect {
				p.live.suspect = true
				p.heard = false
				c.spread(p.ID)
			}
		}
	}
	var near map[string]bool
	if c.subset {
		near = neighbours(c.cfg.NodeID, eligible, c.monitorPeers())
	}
	count := 0
	for _, p := range c.peers {
		was := p.neighbour
		p.neighbour = !c.subset || near[p.ID]
		if p.neighbour && !was {
			p.neighbourSince, p.judgedSilent = now, false
		}
		if !p.neighbour {
			// Its detector stops being fed; should it become a neighbour
			// again, it must be heard before it can be suspected.
			p.heard = false
			if was {
				// Nor is its indicator replica refreshed any more: a stale
				// replica would keep steering probes.
				p.replica = &indicators.Replica{}
				p.epochSeen = 0
			}
		}
		if p.neighbour {
			count++
		}
	}
	c.metrics.MonitoredPeers.Set(float64(count))
	if c.subset {
		c.metrics.MonitoringSubset.Set(1)
	} else {
		c.metrics.MonitoringSubset.Set(0)
	}
}

// deadAfter is how long a member may stay suspected (or, from this node's
// start, unheard of) before it leaves the rings: long enough that a
// restart or a short partition keeps its place, short enough that a
// scale-down frees its monitors' slots within seconds.
func (c *Cluster) deadAfter() time.Duration { return max(3*time.Second, 30*c.cfg.Period) }

// silentGrace is how long a new neighbour may stay unheard before this
// node suspects it, once: it may have died before anyone monitored it
// (its old monitors left the rings with it), and no detector runs on a
// link that never carried a heartbeat.
func (c *Cluster) silentGrace() time.Duration { return max(time.Second, 10*c.cfg.Period) }

// eligible reports whether p is on the rings now. c.mu must be held.
func (c *Cluster) eligible(p *Peer, now time.Time) bool {
	switch {
	case p.live.known && !p.live.suspect:
		return true
	case p.live.known:
		return now.Sub(p.suspectedAt) < c.deadAfter()
	}
	return now.Sub(c.started) < c.deadAfter()
}

// ringSignature sums a hash of every eligible member's id: it changes when
// one leaves or joins the rings, even when another does at the same time.
// c.mu must be held.
func (c *Cluster) ringSignature(now time.Time) uint64 {
	var sig uint64
	for _, p := range c.peers {
		if c.identified(p) && c.eligible(p, now) {
			h := fnv.New64a()
			h.Write([]byte(p.ID))
			sig += h.Sum64()
		}
	}
	return sig
}

// ringChanged reports whether the eligible members differ from those the
// rings were last built over. c.mu must be held.
func (c *Cluster) ringChanged(now time.Time) bool { return c.ringSignature(now) != c.ringSig }

func (c *Cluster) monitorPeers() int {
	if c.cfg.MonitorPeers > 0 {
		return c.cfg.MonitorPeers
	}
	return DefaultMonitorPeers
}

// retransmits is how many heartbeats carry a new point: λ⌈log₂(n+1)⌉.
func (c *Cluster) retransmits() int {
	return 3 * int(math.Ceil(math.Log2(float64(len(c.order)+1))))
}

// spread queues the node's current point for dissemination. c.mu held.
func (c *Cluster) spread(id string) {
	if c.rumors == nil {
		c.rumors = map[string]int{}
	}
	c.rumors[id] = c.retransmits()
}

// pickRumors chooses the rumors for one heartbeat: the queued points with
// the most sends left (the newest news) and antiEntropySlots entries of
// the round-robin walk over the whole table. c.mu must be held.
func (c *Cluster) pickRumors() []wire.Rumor {
	var ids []string
	for id := range c.rumors {
		ids = append(ids, id)
	}
	slices.SortFunc(ids, func(a, b string) int {
		if d := c.rumors[b] - c.rumors[a]; d != 0 {
			return d
		}
		return strings.Compare(a, b)
	})
	var out []wire.Rumor
	in := map[string]bool{}
	for _, id := range ids {
		if len(out) == wire.MaxRumors-antiEntropySlots {
			break
		}
		l, ok := c.pointOf(id)
		if !ok {
			delete(c.rumors, id)
			continue
		}
		out = append(out, l.rumor(id))
		in[id] = true
		if c.rumors[id]--; c.rumors[id] <= 0 {
			delete(c.rumors, id)
		}
	}
	for range len(c.order) {
		if len(out) == wire.MaxRumors || len(out)-len(in) == antiEntropySlots {
			break
		}
		c.walk = (c.walk + 1) % len(c.order)
		id := c.order[c.walk]
		if l, ok := c.pointOf(id); ok && !in[id] {
			out = append(out, l.rumor(id))
		}
	}
	for _, r := range out {
		c.metrics.Rumors.WithLabelValues(rumorKind(r.Suspect), "sent").Inc()
	}
	return out
}

// pointOf returns the newest known point of id (self included).
func (c *Cluster) pointOf(id string) (liveness, bool) {
	if id == c.cfg.NodeID {
		return liveness{known: true, inc: c.incarnation, ver: c.selfVer}, true
	}
	p := c.peers[id]
	if p == nil || !p.live.known {
		return liveness{}, false
	}
	return p.live, true
}

// learn applies a rumor or a direct heartbeat's point to the table. It
// returns whether the routing view must change. c.mu must be held.
func (c *Cluster) learn(r wire.Rumor) (viewChanged bool) {
	if r.Ver == math.MaxUint64 {
		return false // no version can follow it, so no refutation could: refused
	}
	if r.Node == c.cfg.NodeID {
		// Only this node may move past a suspicion of itself.
		if r.Suspect && r.Incarnation == c.incarnation && r.Ver >= c.selfVer {
			c.selfVer = r.Ver + 1
			c.metrics.Refutations.Inc()
			c.spread(r.Node)
		}
		return false
	}
	p := c.peers[r.Node]
	if p == nil || !c.identified(p) {
		return false // membership comes from configuration or DNS, not from rumors
	}
	l := liveness{known: true, inc: r.Incarnation, ver: r.Ver, suspect: r.Suspect}
	if !l.after(p.live) {
		return false
	}
	if p.live.known && l.inc > p.live.inc && l.inc > p.incarnation {
		// A restart learned by gossip: what we held of its indicator
		// describes the old process.
		p.replica = &indicators.Replica{}
		p.epochSeen = 0
	}
	p.live = l
	if !c.subset {
		return false // trust follows this node's own detector; nothing is gossiped
	}
	c.metrics.Rumors.WithLabelValues(rumorKind(l.suspect), "applied").Inc()
	c.spread(r.Node)
	return c.setTrust(p, !l.suspect)
}

// setTrust changes p's trust, records the transition and, on distrust,
// fails over the requests waiting on p now rather than at their timeout.
// It returns whether trust changed. c.mu must be held.
func (c *Cluster) setTrust(p *Peer, trusted bool) bool {
	if p.trusted == trusted {
		return false
	}
	now := time.Now()
	p.trusted = trusted
	p.history = appendHistory(p.history, Transition{At: now, Trusted: trusted})
	c.metrics.peerUp(p.ID, trusted)
	if !trusted {
		p.suspicions++
		p.suspectedAt = now
		c.metrics.Suspicions.WithLabelValues(p.ID).Inc()
		for id, cancel := range p.waiting {
			cancel()
			delete(p.waiting, id)
		}
	}
	return true
}
