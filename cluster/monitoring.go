package cluster

// Which peers a node heartbeats (docs/cluster.md, "Overheads as the
// cluster grows"). All-to-all heartbeats cost every node 10 × (n − 1)
// packets a second; measured, their CPU passes 5 % of a core per node at
// about 26 nodes. Above that each node heartbeats a bounded set:
//
//   - Neighbours: the union of ⌈k/2⌉ random rings over the members
//     (memberlist's, membership.go), each node linked to its successor and
//     predecessor on every ring. The graph is symmetric (so RTT echoes
//     flow both ways), every node has at most k neighbours, and every node
//     computes the same graph from the same members with no coordination.
//   - The peers it routes to: a peer this node sent a request to within
//     routedKeep is heartbeated too, so the learned detector watches every
//     link a request may take and a dead home leaves this node's routing
//     view within a few periods, not at memberlist's agreed death.
//
// Monitored peers are trusted by their heartbeats (a suspicion takes one
// out of this node's routing view until its next heartbeat); the others
// by membership. Nothing is gossiped on heartbeats: memberlist spreads
// membership, and a local suspicion is this node's business only.

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Monitoring says which peers a node exchanges heartbeats with.
type Monitoring int

const (
	// MonitorAuto is all-to-all up to AutoSubsetAbove members, subset above.
	MonitorAuto Monitoring = iota
	// MonitorAll: every node heartbeats every other (detection in one hop).
	MonitorAll
	// MonitorSubset: bounded neighbours plus the peers routed to.
	MonitorSubset
)

// AutoSubsetAbove is the member count (self included) above which auto
// switches to subset monitoring: all-to-all heartbeat CPU passes 5 % of a
// core per node at 26 nodes on the development machine (edge sim cluster
// --budget 0.05, fed by scripts/clusteroverhead), and below about 24 the
// one-hop detection of all-to-all is worth its cost.
const AutoSubsetAbove = 24

// DefaultMonitorPeers is k, the neighbours per node in subset mode,
// besides the peers it routes to. Membership (and so a dead node's
// removal everywhere) is memberlist's; neighbours only keep a few links'
// detectors warm. Measured on 25 processes on 2 cores
// (scripts/membership): k = 8 cost each node 69 heartbeats/s and 1.74 %
// of a core, k = 4 about 39/s and 0.6 points less, which is what lets
// 100 nodes run on 2 cores.
const DefaultMonitorPeers = 4

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

// routedKeep is how long a peer this node routed a request to stays
// monitored with subset monitoring: a page's home keeps being asked, so
// its link keeps being watched, and a peer no longer asked stops costing
// heartbeats within this.
const routedKeep = 10 * time.Second

// recomputeNeighbours decides the monitoring mode for the current members
// and marks the peers this node's rings link it to. c.mu must be held.
func (c *Cluster) recomputeNeighbours() {
	members := []string{c.cfg.NodeID}
	for _, p := range c.peers {
		if p.member {
			members = append(members, p.ID)
		}
	}
	slices.Sort(members)
	autoAbove := AutoSubsetAbove
	if c.cfg.AutoSubsetAbove > 0 {
		autoAbove = c.cfg.AutoSubsetAbove
	}
	c.subset = c.cfg.Monitoring == MonitorSubset || (c.cfg.Monitoring == MonitorAuto && len(members) > autoAbove)
	c.memberCount = len(members)
	var near map[string]bool
	if c.subset {
		near = neighbours(c.cfg.NodeID, members, c.monitorPeers())
	}
	for _, p := range c.peers {
		// A peer memberlist declared dead is not heartbeated: it comes
		// back through membership (a departed pod would otherwise be
		// heartbeated for good).
		p.neighbour = p.member && (!c.subset || near[p.ID])
	}
	if c.subset {
		c.metrics.MonitoringSubset.Set(1)
	} else {
		c.metrics.MonitoringSubset.Set(0)
	}
}

// updateMonitored marks the peers this node heartbeats now (its
// neighbours, and with subset monitoring the members it routed to within
// routedKeep) and returns whether a peer's trust changed. A peer that
// starts being monitored must be heard before its detector may suspect
// it (or stay silent for silentGrace); one that stops is trusted by
// membership again. c.mu must be held.
func (c *Cluster) updateMonitored(now time.Time) (viewChanged bool) {
	count := 0
	for _, p := range c.peers {
		// A peer this node suspects stays monitored while it is a
		// member: unmonitored, membership would trust it again (memberlist
		// hears it through others), the next request would wait out a
		// timeout and suspect it again, every routedKeep for as long as a
		// one-way cut lasts. Monitored, its heartbeats (it answers us while
		// we say we monitor it) tell when this node hears it again.
		mon := p.neighbour || p.member && (now.Sub(p.routedAt) < routedKeep || p.monitored && !p.trusted)
		if mon && !p.monitored {
			p.monitoredSince, p.heard, p.judgedSilent = now, false, false
			defer c.armDeadline(p, now) // once p.monitored is set below
		}
		if !mon {
			// Not watched by this node: trusted while a member.
			viewChanged = c.setTrust(p, p.member) || viewChanged
			if p.monitored {
				c.abandonProbe(p)
			}
		}
		p.monitored = mon
		if mon {
			count++
		}
	}
	c.metrics.MonitoredPeers.Set(float64(count))
	return viewChanged
}

// silentGrace is how long a newly monitored peer may stay unheard before
// this node suspects it, once: it may have died before anyone monitored
// it, and no detector runs on a link that never carried a heartbeat.
func (c *Cluster) silentGrace() time.Duration { return max(time.Second, 10*c.cfg.Period) }

func (c *Cluster) monitorPeers() int {
	if c.cfg.MonitorPeers > 0 {
		return c.cfg.MonitorPeers
	}
	return DefaultMonitorPeers
}

// setTrust changes p's trust, records the transition and, on distrust,
// fails over the requests waiting on p for their header now rather than at
// their timeout, and lets the streams from p go silent only briefly
// (openPeerRequest.suspect); on trust, their silence limit is a trusted peer's
// again.
// It returns whether trust changed. c.mu must be held.
func (c *Cluster) setTrust(p *Peer, trusted bool) bool {
	if p.trusted == trusted {
		return false
	}
	now := time.Now()
	if trusted && (!p.wasTrusted && now.Sub(p.added) >= returnGap || !p.suspectedAt.IsZero() && now.Sub(p.suspectedAt) >= returnGap) {
		// Back from an absence, or heard for the first time a while
		// after it was learnt (a peer learnt while it was away is never
		// suspected: a seventh review's
		// TestAPeerLearntWhileAwayReturnsWhenFirstTrusted): its older
		// pages are not kept a while (returned.go). A peer heard soon
		// after it was learnt returned when it was learnt (addPeer):
		// dating it from its first heartbeat held back copies of pages
		// it made since, at every start of a loaded cluster.
		p.returnedAt = now
	}
	p.wasTrusted = p.wasTrusted || trusted
	p.trusted = trusted
	p.history = appendHistory(p.history, Transition{At: now, Trusted: trusted})
	c.metrics.peerUp(p.ID, trusted)
	if !trusted {
		p.suspicions++
		p.suspectedAt = now
		c.metrics.Suspicions.WithLabelValues(p.ID).Inc()
		for id, w := range p.waiting {
			if w.suspect(c) {
				delete(p.waiting, id)
				p.suspectEnded++
				c.metrics.SuspectedPeerRequests.WithLabelValues("ended").Inc()
			} else {
				p.suspectStreaming++
				c.metrics.SuspectedPeerRequests.WithLabelValues("streaming").Inc()
			}
		}
	} else {
		for _, w := range p.waiting {
			w.trust(c.peerBodyIdle())
		}
	}
	return true
}
