package cluster

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/edgecache/edge/proxy"
)

// A purge goes round the cluster one node after another, and until it has
// reached every node a page it purged at one node can come back from
// another that still holds it: an ingress purged first climbs to the page's
// home, purged last, and keeps what the home still had, for good (a hostile
// review's test, TestPurgeFanOutDoesNotRefillFromAPeer). So from the moment
// a node takes a purge, and for purgeHold after, it keeps no page a peer
// gave it: it serves such a page to the request that asked (the purge is
// still on its way) but does not store it. Pages from the origin are kept
// as ever. Every node's hold starts before its own purge, and the purge
// reaches all peers at once, within a peer timeout, so by the time the
// last node has purged, no node has kept a copy from a node that had not.

// purgeHold is how long a node keeps no peer's page after taking a purge:
// the fan-out reaches every peer at once, each request bounded by the peer
// timeout, so four of them cover it with room for a slow node.
func purgeHold(peerTimeout time.Duration) time.Duration {
	return max(4*peerTimeout, time.Second)
}

// copyHold is the window in which peers' pages are not kept.
type copyHold struct {
	mu      sync.Mutex
	until   time.Time
	seq     uint64        // holds started
	notKept atomic.Uint64 // peers' pages served but not kept (the status page)
}

// holdMark is what a fetch saw of the hold when it began.
type holdMark struct {
	seq  uint64
	held bool
}

func (h *copyHold) start(now time.Time, d time.Duration) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.seq++
	if end := now.Add(d); end.After(h.until) {
		h.until = end
	}
}

func (h *copyHold) mark(now time.Time) holdMark {
	h.mu.Lock()
	defer h.mu.Unlock()
	return holdMark{seq: h.seq, held: now.Before(h.until)}
}

// clearSince reports whether no hold was on at m, none is on now, and none
// started in between: a page fetched over that time may be kept.
func (h *copyHold) clearSince(m holdMark, now time.Time) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return !m.held && m.seq == h.seq && !now.Before(h.until)
}

// holdPeerCopies starts this node's hold: called before its own purge.
func (c *Cluster) holdPeerCopies() {
	c.copies.start(time.Now(), purgeHold(c.cfg.PeerTimeout))
}

// Purge purges p here (local) and at every trusted peer at once, this node
// keeping no peer's page meanwhile; it returns local's count and how many
// peers purged.
func (c *Cluster) Purge(ctx context.Context, p proxy.PurgeRequest, local func(proxy.PurgeRequest) (int, error)) (n, peers int, err error) {
	c.holdPeerCopies()
	if n, err = local(p); err != nil {
		return 0, 0, err
	}
	return n, c.FanOutPurge(ctx, p), nil
}

// PurgeHeldCopies is how many pages peers gave this node that it served
// but did not keep because a purge was going round.
func (c *Cluster) PurgeHeldCopies() uint64 { return c.copies.notKept.Load() }
