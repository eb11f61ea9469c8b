// Package clustersim models what membership and indicator exchange cost
// each node as a cluster grows, from per-peer costs measured on real
// processes (scripts/clusteroverhead): all-to-all (every node heartbeats
// and pulls indicators from every other, as the cluster does today)
// against bounded-subset monitoring (each node probes k random peers and
// gossips suspicions, as SWIM and Lifeguard do, and pulls indicators only
// from the peers it routes to).
package clustersim

import (
	"errors"
	"math"
)

// Costs are the measured per-node and per-peer costs.
type Costs struct {
	PeriodSec        float64 // heartbeat period
	PacketBytes      float64 // bytes of one heartbeat
	PacketCPUSec     float64 // CPU to send one heartbeat plus receive and verify one
	BaseCPUSec       float64 // CPU per second of an idle node with no peers
	IndicatorBPerSec float64 // indicator bytes per second one node sends one peer at the insert rate
}

// Scheme is how a node monitors and learns from its peers.
type Scheme struct {
	Monitors  int // peers each node heartbeats (0: all)
	Indicator int // peers each node pulls indicators from (0: all)
	// GossipFanout: suspicions and membership changes are piggybacked
	// on heartbeats to this many peers per period (SWIM dissemination):
	// no extra packets, a few bytes per change.
	GossipBytes float64
}

// Row is one cluster size's cost per node.
type Row struct {
	Nodes                              int
	PacketsPerSec, BytesPerSec, CPUSec float64 // heartbeats, per node
	IndicatorBytesPerSec               float64 // per node, out (the same comes in)
	DetectRounds                       float64 // periods until every node knows of a failure
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
	r.PacketsPerSec = mon / c.PeriodSec
	r.BytesPerSec = r.PacketsPerSec * (c.PacketBytes + s.GossipBytes)
	r.CPUSec = c.BaseCPUSec + r.PacketsPerSec*c.PacketCPUSec
	r.IndicatorBytesPerSec = ind * c.IndicatorBPerSec
	// All-to-all: every node watches the failed one, so one round
	// suffices. Bounded: the k monitors suspect it in one round, then the
	// suspicion spreads by gossip in about log_k(n) more (SWIM).
	r.DetectRounds = 1
	if s.Monitors > 0 && mon < peers {
		r.DetectRounds = 1 + math.Ceil(math.Log(float64(n))/math.Log(math.Max(mon, 2)))
	}
	return r, nil
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
