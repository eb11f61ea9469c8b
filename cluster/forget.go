package cluster

import (
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// A peer that left the membership (memberlist agreed it died or left, or
// a configured peer it never knew) stays in the peer table for
// Config.ForgetDepartedAfter, marked as no member, and is then forgotten:
// its entry, its replica and detector, and its per-peer metric series go.
// Without this a fleet that replaces nodes (autoscaling, rolling deploys
// on new addresses and names) grows every node's table and its /metrics
// by about a dozen series per node that ever existed.
//
// Configured peers (cluster.peers) are never forgotten: the operator named
// them, and the status page should show one that is down. A peer that
// rejoins after it was forgotten is learnt again as new (memberUp).

// forgetAfter is Config.ForgetDepartedAfter, or its default when unset.
func (c *Cluster) forgetAfter() time.Duration {
	if c.cfg.ForgetDepartedAfter > 0 {
		return c.cfg.ForgetDepartedAfter
	}
	return DefaultConfig().ForgetDepartedAfter
}

// forgetDeparted forgets the peers that left the membership at least
// forgetAfter ago and have no request open to them.
func (c *Cluster) forgetDeparted(now time.Time) {
	after := c.forgetAfter()
	var gone []string
	c.mu.Lock()
	for id, p := range c.peers {
		if p.member || p.configured || p.leftAt.IsZero() || now.Sub(p.leftAt) < after || len(p.waiting) > 0 {
			continue
		}
		if p.timer != nil {
			p.timer.Stop()
		}
		delete(c.peers, id)
		c.metrics.forgetPeer(id)
		c.verifier.Forget(id)
		p.replica.SharePool(nil) // a heartbeat since it left may have put it back (a review's test)
		c.owed.forgot(id, now)   // it may come back: it is owed the purges it misses
		gone = append(gone, id)
	}
	if len(gone) > 0 {
		c.recomputeNeighbours()
	}
	c.mu.Unlock()
	if len(gone) > 0 {
		slices.Sort(gone)
		c.log.Info("departed peers forgotten", slog.String("self", c.cfg.NodeID), slog.String("peers", strings.Join(gone, ",")),
			slog.Duration("left_before", after))
	}
}

// forgetPeer deletes every series labelled with peer.
func (m *Metrics) forgetPeer(peer string) {
	for _, v := range []*prometheus.MetricVec{
		m.PeerUp.MetricVec, m.PeerMember.MetricVec, m.Suspicions.MetricVec, m.FDMargin.MetricVec, m.HeartbeatLoss.MetricVec, m.PeerRTT.MetricVec,
		m.IndicatorPulls.MetricVec, m.NegativeProbes.MetricVec, m.IndicatorEstimates.MetricVec, m.ReplicaAge.MetricVec, m.ReplicaEpoch.MetricVec,
	} {
		v.DeletePartialMatch(prometheus.Labels{"peer": peer})
	}
}
