// Package clustersim models what membership, failure detection and
// indicator exchange cost each node as a cluster grows, from per-packet
// costs measured on real processes (scripts/clusteroverhead,
// scripts/membership): all-to-all (every node heartbeats and pulls
// indicators from every other) against the built bounded scheme, in which
// each node heartbeats k neighbours for its routing view and memberlist
// (SWIM with Lifeguard) keeps the membership: one probe per probe interval,
// gossip only when something changes, push/pull anti-entropy scaled with
// the cluster's size, and a suspicion timeout that grows with log10 n.
//
// The memberlist formulas (suspicion timeout, push/pull scaling) are
// memberlist's own (util.go, v0.7.0); the model is checked against the
// 3-, 24- and 100-node runs in docs/cluster.md.
package clustersim

import (
	"errors"
	"math"
)

// Costs are the measured per-node and per-packet costs.
type Costs struct {
	PeriodSec        float64 // heartbeat period
	PacketBytes      float64 // bytes of one heartbeat
	PacketCPUSec     float64 // CPU to send one heartbeat plus receive and verify one
	BaseCPUSec       float64 // CPU per second of an idle node with no peers
	IndicatorBPerSec float64 // indicator bytes per second one node sends one peer at the insert rate
}

// Membership is memberlist's configuration as edge sets it
// (cluster.membership_probe_interval, cluster.membership_suspicion_mult)
// and the sizes of what it sends.
type Membership struct {
	ProbeIntervalSec  float64 // one probe (ping, ack) per node per interval
	SuspicionMult     float64 // suspicion timeout = mult × max(1, log10 n) × probe interval
	GossipIntervalSec float64 // dissemination rounds, GossipNodes peers each
	GossipNodes       float64
	PushPullSec       float64 // anti-entropy with one random member, below 32 nodes
	ProbeBytes        float64 // one encrypted ping or ack (measured)
	MemberBytes       float64 // one member's state in a push/pull exchange
}

// DefaultMembership is edge's memberlist configuration
// (cluster.DefaultProbeInterval, DefaultSuspicionMult; memberlist's LAN
// gossip defaults) and the packet sizes measured at 100 nodes.
var DefaultMembership = Membership{ProbeIntervalSec: 1, SuspicionMult: 4, GossipIntervalSec: 0.2, GossipNodes: 3, PushPullSec: 5, ProbeBytes: 175, MemberBytes: 90}

// Scheme is how a node monitors and learns from its peers.
type Scheme struct {
	Monitors  int // peers each node heartbeats (0: all)
	Indicator int // peers each node pulls indicators from (0: all)
	// Membership is memberlist's, which runs in both schemes (a zero
	// probe interval leaves it out: the hand-written design before it).
	Membership Membership
}

// Row is one cluster size's cost per node.
type Row struct {
	Nodes                              int
	PacketsPerSec, BytesPerSec, CPUSec float64 // heartbeats and membership, per node, sent
	MembershipPacketsPerSec            float64 // memberlist's UDP packets sent, per node
	MembershipBytesPerSec              float64 // those and the push/pull streams (TCP), per node sent
	IndicatorBytesPerSec               float64 // per node, out (the same comes in)
	// LocalDropSec is the time until the nodes that heartbeat a crashed
	// node take it out of their routing views (three periods: the learned
	// detector's margin on a quiet link); DeadEverywhereSec until every
	// node has removed it from the ring: memberlist's agreed death (a
	// failed probe round, the suspicion timeout with enough confirmations,
	// the dead message's dissemination), or without memberlist each
	// node's own detector.
	LocalDropSec, DeadEverywhereSec float64
}

// Model returns the per-node costs of s at n nodes.
func Model(c Costs, s Scheme, n int) (Row, error) {
	if n < 1 || c.PeriodSec <= 0 {
		return Row{}, errors.New("clustersim: need n ≥ 1 and a positive period")
	}
	peers := float64(n - 1)
	mon := peers
	if s.Monitors > 0 {
		mon = math.Min(peers, float64(s.Monitors))
	}
	ind := peers
	if s.Indicator > 0 {
		ind = math.Min(peers, float64(s.Indicator))
	}
	r := Row{Nodes: n}
	hb := mon / c.PeriodSec
	r.PacketsPerSec = hb
	r.BytesPerSec = hb * c.PacketBytes
	r.IndicatorBytesPerSec = ind * c.IndicatorBPerSec
	r.LocalDropSec = 3 * c.PeriodSec
	r.DeadEverywhereSec = r.LocalDropSec
	if m := s.Membership; m.ProbeIntervalSec > 0 && n > 1 {
		// Each node pings one member per interval and acks the one ping
		// it receives on average.
		r.MembershipPacketsPerSec = 2 / m.ProbeIntervalSec
		pushPull := m.PushPullSec * pushPullScale(n)
		// Each node starts one exchange per interval and answers one:
		// both send the whole member list.
		r.MembershipBytesPerSec = r.MembershipPacketsPerSec*m.ProbeBytes + 2*float64(n)*m.MemberBytes/pushPull
		r.PacketsPerSec += r.MembershipPacketsPerSec
		r.BytesPerSec += r.MembershipBytesPerSec
		suspicion := m.SuspicionMult * math.Max(1, math.Log10(float64(n))) * m.ProbeIntervalSec
		spread := math.Ceil(math.Log(float64(n))/math.Log(math.Max(m.GossipNodes, 2))) * m.GossipIntervalSec
		r.DeadEverywhereSec = m.ProbeIntervalSec + suspicion + spread
	}
	// A membership packet costs what a heartbeat does (decrypt, decode):
	// the 100-node run agrees within its noise.
	r.CPUSec = c.BaseCPUSec + r.PacketsPerSec*c.PacketCPUSec
	return r, nil
}

// pushPullScale is memberlist's stretch of the push/pull interval above 32
// members, so that anti-entropy traffic grows with log n, not n.
func pushPullScale(n int) float64 {
	const threshold = 32
	if n <= threshold {
		return 1
	}
	return math.Ceil(math.Log2(float64(n))-math.Log2(threshold)) + 1
}

// Crossover is the cluster size at which all-to-all heartbeats take more
// than budget (a fraction of one core) per node.
func Crossover(c Costs, budget float64) int {
	if c.PacketCPUSec <= 0 {
		return math.MaxInt
	}
	// base + (n-1)/period × cpu = budget
	n := 1 + (budget-c.BaseCPUSec)*c.PeriodSec/c.PacketCPUSec
	if n < 1 {
		return 1
	}
	return int(n)
}
