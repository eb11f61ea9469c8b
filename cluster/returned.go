package cluster

import (
	"strings"
	"time"

	"github.com/edgecache/edge/proxy"
)

// A peer that comes back after an absence (a restart, a long suspicion, or
// one this node learns for the first time, which may be a node it never
// knew was away) may hold pages that were purged while it was away: the
// nodes that owe it those purges deliver them within a period or so of
// trusting it again (purgeowed.go), but a node that owes it nothing routes
// to it at once. So for returnSettle after a peer's return this node keeps
// no page from it that was made before the return (by its Age): it serves
// such a page to the request that asked, as a purge hold does, and fetches
// it again later (a review's
// TestANodeThatOwesNothingDoesNotKeepAReturningPeersOldPage). Pages the
// peer made since it came back are kept as ever.

const (
	// returnSettle is how long after a peer's return its older pages are
	// not kept: its owing nodes trust it within a few heartbeat periods and
	// deliver at their next monitor round, and a purge by URL or tag takes
	// milliseconds; ten seconds leaves room for a slow prefix purge.
	returnSettle = 10 * time.Second
	// returnGap is how long a suspicion must have lasted for the peer's
	// trust to count as a return: a few lost heartbeats, or a node
	// starved of its CPU for a second or two, is no absence (a restart
	// counts at once, by its incarnation).
	returnGap = 5 * time.Second
)

// madeBeforeAReturn reports whether a peer's answer was made, by any
// cache on its way (the peer that answered, and the caches its
// Cache-Status names: a page relayed from a returning home by a cache that
// never went away, a review's
// TestAReturnedPeersOldPageRelayedByAnIntermediateIsNotKept), before that
// cache's latest return, within returnSettle of it.
func (c *Cluster) madeBeforeAReturn(res proxy.Result, now time.Time) bool {
	age := peerAge(res)
	if c.madeBeforeItReturned(res.Addr, age, now) {
		return true
	}
	for _, v := range res.Resp.Header.Values("Cache-Status") {
		for _, member := range strings.Split(v, ",") {
			id, _, _ := strings.Cut(member, ";")
			if id = strings.TrimSpace(id); id != "" && id != c.cfg.NodeID && c.madeBeforeItReturned(id, age, now) {
				return true
			}
		}
	}
	return false
}

// madeBeforeItReturned reports whether a page peer id answered with, age
// old, was made before the peer's latest return, within returnSettle of it.
func (c *Cluster) madeBeforeItReturned(id string, age time.Duration, now time.Time) bool {
	c.mu.Lock()
	p := c.peers[id]
	var back time.Time
	if p != nil {
		back = p.returnedAt
	}
	c.mu.Unlock()
	if back.IsZero() || now.Sub(back) >= returnSettle {
		return false
	}
	// Age is rounded down to the second, so a page made in the second
	// before the return can pass for one made after it; the pages this is
	// for were made long before (a disk tier's, a partition's).
	return now.Add(-age).Before(back)
}
