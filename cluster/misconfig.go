package cluster

import (
	"errors"
	"net"
	"sync"
	"time"

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

// misconfigMemory remembers what was logged lately: when, by cause and
// source. A plain map under a mutex, bounded by forgetting what is older
// than misconfigRepeat (no cleanup goroutine, which the cluster's
// virtual-time tests would see as a leak).
type misconfigMemory struct {
	mu     sync.Mutex
	logged map[string]time.Time
	causes map[string]*causeWindow
	skews  map[string]*skewSpan // by source: skew refusals lately (lasting)
}

func newMisconfigMemory() *misconfigMemory {
	return &misconfigMemory{logged: map[string]time.Time{}, causes: map[string]*causeWindow{}, skews: map[string]*skewSpan{}}
}

// skewSpan is a run of heartbeats from one source refused for their clock:
// from the first to the last, none more than skewGap periods apart.
type skewSpan struct{ first, last time.Time }

// A skewed clock is reported once its refusals have lasted skewLasting
// periods with no gap of skewGap: a sender whose clock is off has every
// heartbeat refused, one a period; a backlog read at once (this node was
// paused: SIGSTOP, a stalled VM, and read what its socket queued meanwhile)
// is refused in a burst of milliseconds, and is no clock's fault (a new
// user saw "synchronise the clocks" after a SIGCONT).
const (
	skewLasting = 2
	skewGap     = 3
)

// skewLasts records a skew refusal from src at now and reports whether
// they have lasted skewLasting periods.
func (m *misconfigMemory) skewLasts(src string, now time.Time, period time.Duration) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	sp := m.skews[src]
	if sp == nil || now.Sub(sp.last) > skewGap*period {
		if len(m.skews) >= 1024 {
			clear(m.skews) // a flood of sources: the counters have them
		}
		sp = &skewSpan{first: now}
		m.skews[src] = sp
	}
	sp.last = now
	return now.Sub(sp.first) >= skewLasting*period
}

// fresh reports whether key was logged within misconfigRepeat.
func (m *misconfigMemory) fresh(key string, now time.Time) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	at, ok := m.logged[key]
	return ok && now.Sub(at) < misconfigRepeat
}

// claim records key as logged now, reporting false if it already was
// within misconfigRepeat (or the memory is full of recent causes: the
// counters have the rest).
func (m *misconfigMemory) claim(key string, now time.Time) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if at, ok := m.logged[key]; ok && now.Sub(at) < misconfigRepeat {
		return false
	}
	if len(m.logged) >= 1024 {
		for k, at := range m.logged {
			if now.Sub(at) >= misconfigRepeat {
				delete(m.logged, k)
			}
		}
		if len(m.logged) >= 1024 {
			return false
		}
	}
	m.logged[key] = now
	return true
}

// causeWindow counts the sources logged for one cause since start.
type causeWindow struct {
	start time.Time
	n     int
}

// countCause counts one more source of cause within misconfigRepeat and
// returns how many there were (a map lookup: this runs for every refused
// packet of a flood).
func (c *Cluster) countCause(cause string) int {
	m := c.warned
	m.mu.Lock()
	defer m.mu.Unlock()
	w := m.causes[cause]
	if now := time.Now(); w == nil || now.Sub(w.start) >= misconfigRepeat {
		w = &causeWindow{start: now}
		m.causes[cause] = w
	}
	w.n++
	return w.n
}

// warnOnce logs msg under key unless it was logged within misconfigRepeat.
func (c *Cluster) warnOnce(key, msg string, args ...any) {
	if !c.warned.claim(key, time.Now()) {
		return
	}
	c.log.Warn(msg, args...)
}

// sourcesPerCause bounds the sources logged per cause per
// misconfigRepeat: anyone who can send UDP to the cluster port can make
// refused packets from many addresses, and the log must not follow them.
const sourcesPerCause = 8

// checkIDConflict warns if h, a heartbeat from an authentic sender that
// gives this node's id, is of another incarnation than ours: a second
// node runs with this node's id (our own heartbeats, looped back by a
// DNS name that lists us, carry our incarnation).
func (c *Cluster) checkIDConflict(h wire.Heartbeat, fromAddr *net.UDPAddr) {
	if h.Node != c.cfg.NodeID || h.Incarnation == c.incarnation {
		return
	}
	from := ""
	if fromAddr != nil {
		from = fromAddr.String()
	}
	key := "conflict " + from
	if fromAddr != nil {
		key = "conflict " + fromAddr.IP.String() // by host: its port changes with each restart, or each forged packet
	}
	c.warnOnce(key, "another node sends heartbeats with this node's id: the two cannot both be on the ring",
		"node", h.Node, "from", from, "remedy", "give every node its own node_id")
}

// heartbeatRejected is told of every refused heartbeat (wire.Receive).
// Sources are told apart by address, not port (a sender's port changes
// with each restart).
func (c *Cluster) heartbeatRejected(from *net.UDPAddr, err error) {
	var re *reject.Error
	if !errors.As(err, &re) {
		return
	}
	var mis *wire.Misaddressed
	if errors.As(err, &mis) && mis.Node == c.cfg.NodeID {
		// Sent with this node's id to another: our own, looped back by
		// a name that lists us, or a second node using our id.
		c.checkIDConflict(mis.Heartbeat, from)
		return
	}
	src := from.IP.String()
	if re.Reason == wire.RejectSkew && !c.warned.skewLasts(src, time.Now(), c.cfg.Period) {
		return // perhaps a backlog read after a pause: reported if it lasts
	}
	if !c.warned.fresh(string(re.Reason)+" "+src, time.Now()) && c.countCause(string(re.Reason)) > sourcesPerCause {
		return // logged for enough sources lately; the counters have the rest
	}
	switch re.Reason {
	case wire.RejectMAC:
		c.warnOnce(string(re.Reason)+" "+src, "heartbeats from this address fail authentication: its cluster.secret differs from this node's, or it is not an edge node",
			"from", src, "remedy", "give every node the same cluster.secret")
	case wire.RejectSkew:
		c.warnOnce(string(re.Reason)+" "+src, "heartbeats from this address carry a clock too far from this node's",
			"from", src, "detail", re.Detail, "remedy", "synchronise the clocks (NTP)")
	case wire.RejectReceiver:
		c.warnOnce(string(re.Reason)+" "+src, "authentic heartbeats addressed to another node arrive here: the peer list that sender uses gives that node's id this node's address, or a copy of its heartbeats is sent here",
			"from", src, "detail", re.Detail, "remedy", "check cluster.peers (or the DNS names in it) on the sender: each id with its own node's address")
	case wire.RejectMagic, wire.RejectVersion:
		c.warnOnce(string(re.Reason)+" "+src, "packets on the cluster port that are not edge heartbeats of this version",
			"from", src, "reason", string(re.Reason), "remedy", "check that cluster.listen is not shared with another service, and that every node runs a compatible version")
	}
}

// checkUnreached reports peers this node heartbeats that have never
// answered since startup.
func (c *Cluster) checkUnreached(now time.Time) {
	type silent struct {
		id, addr string
		since    time.Time
	}
	var found []silent
	c.mu.Lock()
	for id, p := range c.peers {
		since := p.added
		if since.IsZero() {
			since = c.started
		}
		if !p.seen && (!c.subset || p.monitored) && now.Sub(since) >= unreachedAfter*c.cfg.Period {
			found = append(found, silent{id, p.Addr, since})
		}
	}
	c.mu.Unlock()
	for _, s := range found {
		c.warnOnce("unreached "+s.id, "a peer has sent no heartbeat since this node learned of it",
			"peer", s.id, "addr", s.addr, "silent_for", now.Sub(s.since).Round(time.Second).String(),
			"remedy", "check the address in cluster.peers, that the peer runs, the firewall (UDP and TCP on the cluster port) and cluster.secret")
	}
}
