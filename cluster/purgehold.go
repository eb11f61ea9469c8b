package cluster

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/edgecache/edge/proxy"
)

// A purge goes round the cluster, and until it has reached every node a
// page it purged at one node can come back from another that still holds
// it: an ingress purged first climbs to the page's home, purged last, and
// keeps what the home still had, for good (a hostile review's test,
// TestPurgeFanOutDoesNotRefillFromAPeer). So while a purge goes round,
// every node it has reached keeps no page a peer gives it under a key the
// purge names: it serves such a page to the request that asked (the purge
// is still on its way) but does not store it. Pages from the origin, and
// pages the purge does not name, are kept as ever (a purge of one URL
// holding back every page was a review's finding,
// TestAnUnrelatedPurgeDoesNotStopKeeping; a tag purge holding back every
// page for ten minutes another, TestAnUnrelatedTagPurgeDoesNotStopKeeping):
// a URL or prefix names keys, a tag the answers that carry it.
//
// The round's end bounds the hold. The node sending the purge holds from
// before its own purge until the last peer has answered (Purge). A peer
// cannot know when that is, so it holds from before its own purge for
// purgeHold, longer than any round can last after it was reached: the
// fan-out asks every peer at once, each request bounded by fanOutBound.
// (A fixed window at the sender too was shorter than a slow round: a
// review's test, TestPurgeHoldOutlastsASlowRound.)

// fanOutBound bounds one peer's purge request: the dial and the answer's
// header, each bounded by the peer client (cluster.go: newPeerClient).
func fanOutBound(peerTimeout time.Duration) time.Duration { return 5 * peerTimeout }

// purgeHold is how long a peer keeps no peer's page after taking a purge:
// past the end of any round that reached it, with a second to spare.
func purgeHold(peerTimeout time.Duration) time.Duration {
	return fanOutBound(peerTimeout) + time.Second
}

// keepEnded is how long an ended hold is remembered: for fetches that
// began before it ended (a fetch older than that keeps nothing a hold
// forgotten since may have named), and for pages made before it began
// that still reach this node after it (pageMadeBefore).
const keepEnded = 10 * time.Minute

// ageSlack is how much older a peer's page may be than its Age says: each
// cache on the way rounds the Age it sends down to the second.
const ageSlack = 3 * time.Second

// PurgeScope tells whether a purge names the page under a key whose
// answer has header hdr (proxy.Handler.PurgeScope); nil: every page.
type PurgeScope func(key string, hdr http.Header) bool

// copyHold is the purges going round, as far as this node knows. A URL
// purge's hold is found by its key (a site that purges URLs many times a
// second keeps thousands for keepEnded: scanning them all on every peer's
// answer cost 82 µs at 6,000); the others, prefixes and tags, are looked
// at one by one.
type copyHold struct {
	mu       sync.Mutex
	seq      uint64             // holds started
	byKey    map[string][]*hold // URL purges, by the URL's key
	scoped   []*hold            // every other purge
	prunedAt time.Time          // when the ended holds were last forgotten
	notKept  atomic.Uint64      // peers' pages served but not kept (the status page)
}

// hold is one purge going round.
type hold struct {
	seq   uint64
	began time.Time
	key   string     // a URL purge's key ("" for the others)
	scope PurgeScope // the others' test (nil: every page)
	open  bool       // until the sender's round ends (closed by end)
	until time.Time  // otherwise, its end
}

// names reports whether e names the page under key whose answer has hdr.
// A URL purge's hold is only ever looked at under its key or a key that
// extends it after a NUL (keepable's look-up), which is what it names.
func (e *hold) names(key string, hdr http.Header) bool {
	return e.key != "" || e.scope == nil || e.scope(key, hdr)
}

// holdMark is what a fetch saw of the holds when it began.
type holdMark struct {
	seq uint64
	at  time.Time
}

// start holds what key (a URL purge's, or "") or else scope names, for d
// from now (a purge taken from a peer), or until end if d is 0 (a purge
// this node sends round).
func (h *copyHold) start(key string, scope PurgeScope, now time.Time, d time.Duration) *hold {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.seq++
	e := &hold{seq: h.seq, began: now, key: key, scope: scope, open: d == 0, until: now.Add(d)}
	if key != "" {
		if h.byKey == nil {
			h.byKey = map[string][]*hold{}
		}
		h.byKey[key] = append(h.byKey[key], e)
	} else {
		h.scoped = append(h.scoped, e)
	}
	return e
}

// pruneLocked forgets the holds ended more than keepEnded ago, at most
// once a second (it looks at every hold).
func (h *copyHold) pruneLocked(now time.Time) {
	if now.Sub(h.prunedAt) < time.Second {
		return
	}
	h.prunedAt = now
	old := now.Add(-keepEnded)
	keep := func(l []*hold) []*hold {
		kept := l[:0]
		for _, e := range l {
			if !e.open && e.until.Before(old) {
				continue
			}
			kept = append(kept, e)
		}
		clear(l[len(kept):])
		return kept
	}
	h.scoped = keep(h.scoped)
	for k, l := range h.byKey {
		if l = keep(l); len(l) == 0 {
			delete(h.byKey, k)
		} else {
			h.byKey[k] = l
		}
	}
}

func (h *copyHold) end(e *hold, now time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	e.open, e.until = false, now
}

func (h *copyHold) mark(now time.Time) holdMark {
	h.mu.Lock()
	defer h.mu.Unlock()
	return holdMark{seq: h.seq, at: now}
}

// keepable reports whether a page under key, fetched from a peer from m
// until now, age old (its Age field), may be kept: no hold naming key was
// on at any moment between, and the page was not made before a purge that
// names it (pageMadeBefore).
//
// The second rule is what the first cannot see: a page made before a
// purge can reach this node after its hold, through a peer that took it
// during the round and still streams it to anyone who joins (a review's
// test, TestAHeldFillIsNotJoinedAfterTheRound). Its Age, which every cache
// on the way adds to, says when it was made: earlier than the purge, it
// is what the purge removed.
func (h *copyHold) keepable(m holdMark, key string, hdr http.Header, age time.Duration, now time.Time) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.pruneLocked(now)
	if now.Sub(m.at) >= keepEnded {
		// A hold forgotten since (or about to be: the prune runs once a
		// second) may have overlapped the fetch. Keep is decided when the
		// answer's header comes, which no timeout lets take this long.
		return false
	}
	made := now.Add(-age - ageSlack) // the earliest it can have been made
	against := func(l []*hold) bool {
		for _, e := range l {
			if e.until.Before(now.Add(-keepEnded)) && !e.open {
				continue // ended long ago: forgotten at the next prune
			}
			overlaps := e.seq > m.seq || e.open || e.until.After(m.at)
			if (overlaps || made.Before(e.began)) && e.names(key, hdr) {
				return true
			}
		}
		return false
	}
	if against(h.scoped) || against(h.byKey[key]) {
		return false
	}
	// A slice's key, or a keyed variant's, extends its URL's after a NUL
	// (which a site's name, in front, cannot hold: config refuses control
	// characters; each NUL is tried all the same).
	for i := range len(key) {
		if key[i] == 0 && against(h.byKey[key[:i]]) {
			return false
		}
	}
	return true
}

// PurgeNamer tells which pages a purge names (proxy.Handler does).
type PurgeNamer interface {
	// PurgeKey is a URL purge's key ("" for any other purge).
	PurgeKey(proxy.PurgeRequest) string
	// PurgeScope tests any other purge (nil: every page).
	PurgeScope(proxy.PurgeRequest) func(key string, hdr http.Header) bool
}

// SetPurgeNamer gives the cluster what tells which pages a purge names;
// without it every purge holds back every peer's page while it goes round.
func (c *Cluster) SetPurgeNamer(n PurgeNamer) { c.purgeNamer = n }

// startHold holds what p names, as copyHold.start.
func (c *Cluster) startHold(p proxy.PurgeRequest, d time.Duration) *hold {
	var key string
	var scope PurgeScope
	if c.purgeNamer != nil {
		if key = c.purgeNamer.PurgeKey(p); key == "" {
			scope = c.purgeNamer.PurgeScope(p)
		}
	}
	return c.copies.start(key, scope, time.Now(), d)
}

// maxSendersHold bounds the hold a sender may ask of a peer.
const maxSendersHold = 10 * time.Minute

// holdForPeersPurge starts the hold of a purge taken from a peer: called
// before this node's purge. sendersMs is the sender's own hold length
// (the hold_ms parameter): a peer holds for the longer of its own and
// the sender's, since the round is bounded by the sender's peer timeout,
// which need not be this node's (a review's test,
// TestPeerHoldFollowsTheSendersBound).
func (c *Cluster) holdForPeersPurge(p proxy.PurgeRequest, sendersMs string) {
	if p.Validate() != nil {
		return // refused by the purge itself: it names nothing (a hold would name everything)
	}
	d := purgeHold(c.cfg.PeerTimeout)
	if ms, err := strconv.ParseInt(sendersMs, 10, 64); err == nil && ms > 0 {
		d = max(d, min(time.Duration(ms)*time.Millisecond, maxSendersHold))
	}
	c.startHold(p, d)
}

// Purge purges p here (local) and at every trusted peer at once, this node
// keeping no peer's page that p names from before its own purge until
// every peer has answered; it returns local's count and how many peers
// purged.
func (c *Cluster) Purge(ctx context.Context, p proxy.PurgeRequest, local func(proxy.PurgeRequest) (int, error)) (n int, peers FanOut, err error) {
	// A purge that names nothing is refused before it holds anything: its
	// scope would be nil, which a hold reads as every page (a review
	// found a 400 stopping the node keeping peers' pages for ten minutes).
	if err := p.Validate(); err != nil {
		return 0, FanOut{}, err
	}
	e := c.startHold(p, 0)
	defer func() { c.copies.end(e, time.Now()) }()
	// An operator's purge of everything is a wipe here as much as a
	// peer's: an older one owed to this node is covered by it (a review's
	// TestAnOperatorsWipeCoversAnOlderOwedWipe).
	endWipe := func(bool) {}
	if p == purgeEverything {
		endWipe = c.purgeIDs.wipeBegin(time.Now())
	}
	n, err = local(p)
	endWipe(err == nil || errors.Is(err, proxy.ErrPurgeIncomplete))
	if err != nil && !errors.Is(err, proxy.ErrPurgeIncomplete) {
		return 0, FanOut{}, err
	}
	// An incomplete local purge (a file its disk could not remove) has
	// taken effect here: the peers are asked all the same, and the error
	// is reported with their count.
	peers = c.FanOutPurge(ctx, p)
	// A second pass here once the round is over: a fill begun here during
	// it, after the first pass (so the purge log does not name it), may
	// carry a copy from a peer not yet purged, which the hold keeps out of
	// the store but which requests could join until its end; after this
	// pass none joins it or stores it, and whatever was stored meanwhile
	// goes (a review's
	// TestS60AFillWhoseHeaderIsNotInWhenThePurgeReturnsIsStillJoined).
	// What it removes was counted by the first.
	_, _ = local(p)
	return n, peers, err
}

// PurgeHeldCopies is how many pages peers gave this node that it served
// but did not keep because a purge naming them was going round.
func (c *Cluster) PurgeHeldCopies() uint64 { return c.copies.notKept.Load() }
