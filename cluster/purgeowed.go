package cluster

import (
	"context"
	"io"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/edgecache/edge/proxy"
)

// A purge a peer did not take when it went round (the peer was suspected
// or gone, the request failed or timed out) is owed to it, and delivered
// when this node trusts it again. Otherwise a node that was down during a
// purge (a restart, a crash, a partition) comes back with the purged
// pages on its disk tier and serves them, to its clients and, as their
// home, to every other node, for as long as they stay fresh: an
// operator's takedown undone by a reboot.
//
// What is owed is kept per peer id, in order, in memory: a restart of the
// node that owes loses it (the purge's answer says how many peers it was
// owed to, so an operator can purge again). A peer owed more than
// owedPerPeer purges is owed one purge of everything instead (a prefix
// "/": its cache starts empty, which is what it would have had, by
// purges, and a bounded list). Ids of peers that left are kept owed for
// owedKeep after their last owed purge, so that a node away for a
// rolling deploy or a repair gets what it missed; at most owedTracked ids
// are kept.

const (
	// owedPerPeer bounds one peer's list: a site that purges a few times
	// a second owes a peer away for a minute about this many.
	owedPerPeer = 256
	// owedKeep is how long a peer's list is kept after the last purge it
	// was owed: a node down longer than a day is rebuilt, not restarted.
	owedKeep = 24 * time.Hour
	// owedTracked bounds the ids owed purges at all, the oldest dropped
	// first (a fleet that replaces nodes under new names leaves ids that
	// never come back).
	owedTracked = 256
	// owedRetry is how often owed purges are offered to peers this node
	// trusts: a returning peer serves what it owes for at most about this
	// long after this node trusts it again.
	owedRetry = time.Second
)

// purgeEverything is what a peer owed too many purges is owed instead.
var purgeEverything = proxy.PurgeRequest{Prefix: "/"}

type owedPurge struct {
	seq uint64
	p   proxy.PurgeRequest
}

type owedList struct {
	purges     []owedPurge
	last       time.Time // when the latest purge was owed (or the id tracked)
	delivering bool
}

// owedPurges is what each peer id is owed.
type owedPurges struct {
	mu     sync.Mutex
	seq    uint64
	byPeer map[string]*owedList
	total  int // purges owed, all ids
}

// owe records p as owed to id at now.
func (o *owedPurges) owe(id string, p proxy.PurgeRequest, now time.Time, m *Metrics) {
	o.mu.Lock()
	defer o.mu.Unlock()
	l := o.listLocked(id, now)
	l.last = now
	if len(l.purges) == 1 && l.purges[0].p == purgeEverything {
		return // already owed everything
	}
	o.seq++
	l.purges = append(l.purges, owedPurge{seq: o.seq, p: p})
	o.total++
	if len(l.purges) > owedPerPeer {
		o.total -= len(l.purges) - 1
		o.seq++
		l.purges = append(l.purges[:0], owedPurge{seq: o.seq, p: purgeEverything})
		m.OwedPurgeEvents.WithLabelValues("collapsed").Inc()
	}
}

// track keeps id owed purges from now on (a peer forgotten: forget.go),
// if it is not already.
func (o *owedPurges) track(id string, now time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if _, ok := o.byPeer[id]; !ok {
		o.listLocked(id, now)
	}
}

// listLocked is id's list, made if absent; an id over owedTracked drops
// the list owed least lately.
func (o *owedPurges) listLocked(id string, now time.Time) *owedList {
	if o.byPeer == nil {
		o.byPeer = map[string]*owedList{}
	}
	l := o.byPeer[id]
	if l != nil {
		return l
	}
	if len(o.byPeer) >= owedTracked {
		var oldest string
		for k, x := range o.byPeer {
			if !x.delivering && (oldest == "" || x.last.Before(o.byPeer[oldest].last)) {
				oldest = k
			}
		}
		if oldest != "" {
			o.total -= len(o.byPeer[oldest].purges)
			delete(o.byPeer, oldest)
		}
	}
	l = &owedList{last: now}
	o.byPeer[id] = l
	return l
}

// ids is every id owed purges or tracked.
func (o *owedPurges) ids() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := make([]string, 0, len(o.byPeer))
	for id := range o.byPeer {
		out = append(out, id)
	}
	return out
}

// owedTo is how many purges id is owed.
func (o *owedPurges) owedTo(id string) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	if l := o.byPeer[id]; l != nil {
		return len(l.purges)
	}
	return 0
}

// count is how many purges are owed, all ids.
func (o *owedPurges) count() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.total
}

// expire drops the lists owed nothing new for owedKeep.
func (o *owedPurges) expire(now time.Time, m *Metrics) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for id, l := range o.byPeer {
		if !l.delivering && now.Sub(l.last) >= owedKeep {
			m.OwedPurgeEvents.WithLabelValues("expired").Add(float64(len(l.purges)))
			o.total -= len(l.purges)
			delete(o.byPeer, id)
		}
	}
}

// claim marks id's list as being delivered and returns what it holds
// (nothing, if empty or already being delivered).
func (o *owedPurges) claim(id string) []owedPurge {
	o.mu.Lock()
	defer o.mu.Unlock()
	l := o.byPeer[id]
	if l == nil || l.delivering || len(l.purges) == 0 {
		return nil
	}
	l.delivering = true
	return append([]owedPurge(nil), l.purges...)
}

// settle removes the purge numbered seq from id's list (delivered), if it
// is still there (a collapse may have replaced it).
func (o *owedPurges) settle(id string, seq uint64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	l := o.byPeer[id]
	if l == nil {
		return
	}
	for i, x := range l.purges {
		if x.seq == seq {
			l.purges = append(l.purges[:i], l.purges[i+1:]...)
			o.total--
			return
		}
	}
}

// release ends id's delivery.
func (o *owedPurges) release(id string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if l := o.byPeer[id]; l != nil {
		l.delivering = false
	}
}

// sendPurge asks the peer at addr to purge p, reporting whether the purge
// was taken (or refused for good: a request it will never take is not
// owed) and whether it is owed (no answer, or the peer could not take it
// now).
func (c *Cluster) sendPurge(ctx context.Context, addr string, p proxy.PurgeRequest) (taken, owed bool) {
	// The sender's hold length goes with it: a peer holds at least as
	// long (its own peer_timeout may be shorter: purgehold.go).
	q := p.Query() + "&hold_ms=" + strconv.FormatInt(purgeHold(c.cfg.PeerTimeout).Milliseconds(), 10)
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, c.scheme+"://"+addr+"/_edge/purge?"+q, nil)
	resp, err := c.do(req)
	if err != nil {
		return false, true
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusOK:
		return true, false
	case http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout, http.StatusTooManyRequests:
		return false, true
	}
	// 500 is a purge that took effect at the peer but left a file on its
	// failing disk (it reports that itself); 4xx will never be taken.
	return false, false
}

// redeliverPurges offers owed purges to the peers this node trusts, each
// peer's in order, one request at a time, stopping at the first not
// taken; it also forgets the lists owed nothing new for owedKeep.
func (c *Cluster) redeliverPurges(ctx context.Context, now time.Time) {
	c.owed.expire(now, c.metrics)
	for _, id := range c.owed.ids() {
		c.mu.Lock()
		p := c.peers[id]
		addr, ready := "", p != nil && p.trusted && p.member
		if ready {
			addr = p.Addr
		}
		c.mu.Unlock()
		if !ready {
			continue
		}
		list := c.owed.claim(id)
		if len(list) == 0 {
			continue
		}
		go func() {
			defer c.owed.release(id)
			for _, x := range list {
				rctx, cancel := context.WithTimeout(ctx, fanOutBound(c.cfg.PeerTimeout))
				taken, owed := c.sendPurge(rctx, addr, x.p)
				cancel()
				if owed {
					c.metrics.OwedPurgeEvents.WithLabelValues("failed").Inc()
					return
				}
				if taken {
					c.metrics.OwedPurgeEvents.WithLabelValues("delivered").Inc()
				} else {
					c.metrics.OwedPurgeEvents.WithLabelValues("refused").Inc()
				}
				c.owed.settle(id, x.seq)
			}
		}()
	}
}
