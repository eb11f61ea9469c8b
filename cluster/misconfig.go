package cluster

import (
	"errors"
	"net"
	"time"

	"github.com/hashicorp/golang-lru/v2/expirable"

	"github.com/edgecache/edge/cluster/wire"
	"github.com/edgecache/edge/internal/reject"
)

// Misconfiguration is logged where an operator looks first, once per
// cause per misconfigRepeat, with the remedy: heartbeats refused (a wrong
// cluster.secret, a skewed clock) by sender, and peers never heard from.
// Counters alone (edge_heartbeat_rejections_total) told nobody.

// misconfigRepeat is how often one cause is logged again while it lasts.
const misconfigRepeat = 10 * time.Minute

// unreachedAfter is how long a peer may stay silent after startup before
// it is reported as never reached: a few periods' worth of start-up.
const unreachedAfter = 20

func newMisconfigMemory() *expirable.LRU[string, struct{}] {
	return expirable.NewLRU[string, struct{}](1024, nil, misconfigRepeat)
}

// warnOnce logs msg under key unless it was logged within misconfigRepeat.
func (c *Cluster) warnOnce(key, msg string, args ...any) {
	if c.warned.Contains(key) {
		return
	}
	c.warned.Add(key, struct{}{})
	c.log.Warn(msg, args...)
}

// heartbeatRejected is told of every refused heartbeat (wire.Receive).
func (c *Cluster) heartbeatRejected(from *net.UDPAddr, err error) {
	var re *reject.Error
	if !errors.As(err, &re) {
		return
	}
	src := from.String()
	switch re.Reason {
	case wire.RejectMAC:
		c.warnOnce("mac "+src, "heartbeats from this address fail authentication: its cluster.secret differs from this node's, or it is not an edge node",
			"from", src, "remedy", "give every node the same cluster.secret")
	case wire.RejectSkew:
		c.warnOnce("skew "+src, "heartbeats from this address carry a clock too far from this node's",
			"from", src, "detail", re.Detail, "remedy", "synchronise the clocks (NTP)")
	case wire.RejectMagic, wire.RejectVersion:
		c.warnOnce("foreign "+src, "packets on the cluster port that are not edge heartbeats of this version",
			"from", src, "reason", string(re.Reason), "remedy", "check that cluster.listen is not shared with another service, and that every node runs a compatible version")
	}
}

// checkUnreached reports peers this node heartbeats that have never
// answered since startup.
func (c *Cluster) checkUnreached(now time.Time) {
	if now.Sub(c.started) < unreachedAfter*c.cfg.Period {
		return
	}
	type silent struct{ id, addr string }
	var found []silent
	c.mu.Lock()
	for id, p := range c.peers {
		if !p.seen && (!c.subset || p.neighbour) {
			found = append(found, silent{id, p.Addr})
		}
	}
	c.mu.Unlock()
	for _, s := range found {
		c.warnOnce("unreached "+s.id, "a peer has sent no heartbeat since this node started",
			"peer", s.id, "addr", s.addr, "silent_for", now.Sub(c.started).Round(time.Second).String(),
			"remedy", "check the address in cluster.peers, that the peer runs, the firewall (UDP and TCP on the cluster port) and cluster.secret")
	}
}
