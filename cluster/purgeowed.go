package cluster

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
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
// Every node that takes a purge owes it to the peers it knows are away,
// not only the node the operator sent it to (one that started after a
// peer left may not know it). While this node owes a peer purges it keeps
// it out of its own routing view, so that it does not copy a purged page
// back from it; it delivers them within a period of trusting it again.
// A purge that a trusted peer answered late is settled when the late
// answer comes, so a slow peer is not owed what it took. Every purge
// carries an id, and a peer answers a repeat of one it took at once
// (purgeIDs), so a purge owed by several nodes, or delivered again after
// a lost answer, runs once. A redelivered purge is marked, and the peer
// that takes it owes it to nobody: the nodes that took it in its round
// owe it themselves.
//
// What is owed is kept per peer id, in order, in memory, and in a file in
// cluster.state_dir when that is set (owedstate.go), read back at start;
// without it a restart of the node that owes loses it (the purge's answer
// says how many peers it was owed to, so an operator can purge again). A
// peer owed more than
// owedPerPeer purges is owed one purge of everything instead (a prefix
// "/": its cache starts empty, which is what it would have had, by
// purges, and a bounded list). Ids of peers that left and were forgotten
// (forget.go) stay owed for owedKeep after they were forgotten, so that a
// node away for a repair gets what it missed; at most owedTracked such
// ids are kept, the oldest dropped first. Peers in this node's table are
// never dropped: the table is bounded by forgetting.

const (
	// owedPerPeer bounds one peer's list: a site that purges a few times
	// a second owes a peer away for a minute about this many.
	owedPerPeer = 256
	// owedKeep is how long a forgotten peer's id stays owed purges: a
	// node down longer than a day is rebuilt, not restarted.
	owedKeep = 24 * time.Hour
	// owedTracked bounds the forgotten ids owed purges (a fleet that
	// replaces nodes under new names leaves ids that never come back).
	owedTracked = 256
	// owedRetry is how long after a failed delivery the next is tried.
	owedRetry = time.Second
	// lateFactor × fanOutBound is how long a purge request to a peer may
	// take before its answer is no longer waited for at all: past
	// fanOutBound the round counts it as owed, and an answer up to here
	// settles it.
	lateFactor = 4
)

// purgeEverything is what a peer owed too many purges is owed instead.
var purgeEverything = proxy.PurgeRequest{Prefix: "/"}

type owedPurge struct {
	seq uint64
	p   proxy.PurgeRequest
	pid string // the purge's id: a peer that took it already answers a repeat at once (purgeIDs)
	// away are the peers its round could not reach, named again when it
	// is delivered, so that the peer taking it owes it to those it knows
	// (a review's TestARedeliveredPurgeStillNamesThePeersItsSenderCouldNotReach).
	away []string
	// covers, for a purge of everything, is when the newest purge it
	// stands for was owed: a peer whose own wipe began after that skips
	// it, so that several owing nodes wipe it once whatever order they
	// saw the purges in (a review's
	// TestAPeerOwedEverythingByNodesThatSawPurgesInAnotherOrderIsWipedOnce).
	covers time.Time
	// stands, for a purge of everything, is the ids of the purges it
	// stands for, when every one is known (nil: unknown): a peer that
	// took them all does not wipe (a cut between two nodes only, each
	// owing the other what a third sent both: a seventh review's
	// TestACutBetweenTwoNodesDoesNotWipeThemWhenTheyMissedNothing).
	stands []string
}

// standsMax bounds the ids a purge of everything names (sent in its body,
// 25 bytes each); a peer owed more is wiped.
const standsMax = 4 * owedPerPeer

// collapsed is the purge of everything that stands for purges, named pid:
// the peers their rounds could not reach (so that the peer taking it owes
// it to them: a seventh review's
// TestACollapsedPurgeStillNamesThePeersItsSenderCouldNotReach) and their
// ids, when all are known.
func collapsed(purges []owedPurge, seq uint64, pid string, peer string) owedPurge {
	e := owedPurge{seq: seq, p: purgeEverything, pid: pid, covers: time.Now(), stands: []string{}}
	for _, x := range purges {
		e.fold(x.pid, x.away, peer)
	}
	return e
}

// fold adds a purge (id pid, whose round could not reach away) to e, a
// purge of everything owed to peer. A peer that took pid ran it (a purge
// of everything too: one it took was run, or covered by a wipe it ran).
func (e *owedPurge) fold(pid string, away []string, peer string) {
	for _, id := range away {
		if id != peer && len(e.away) < sendersAwayMax && !slices.Contains(e.away, id) {
			e.away = append(e.away, id)
		}
	}
	switch {
	case e.stands == nil:
	case pid == "" || len(e.stands) == standsMax:
		e.stands = nil // some purge it stands for is not named: the peer wipes
	default:
		e.stands = append(e.stands, pid)
	}
}

// everythingID names the purge of everything that stands for the purges
// from the one named first to the one named last: the same at every node
// that owes a peer the same purges.
func everythingID(first, last string) string {
	sum := sha256.Sum256([]byte("everything\x00" + first + "\x00" + last))
	return hex.EncodeToString(sum[:12])
}

// newPurgeID names one purge as it goes round the cluster.
func newPurgeID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

type owedList struct {
	purges     []owedPurge
	forgotten  time.Time           // when its peer was forgotten (zero while in the table)
	pids       map[string]struct{} // ids owed since the list began (at most 4 × owedPerPeer kept)
	retryAt    time.Time           // no delivery before this (after a failed one)
	delivering bool
}

// owedPurges is what each peer id is owed.
type owedPurges struct {
	mu     sync.Mutex
	seq    uint64
	byPeer map[string]*owedList
	total  int // purges owed, all ids
	// any mirrors total > 0 for owedTo's callers on every miss (candidates)
	// and view rebuild, who then skip the lock when nothing is owed.
	any atomic.Bool
	// path is the state file (owedstate.go; "" keeps it in memory only);
	// dirty says a change is not written yet.
	path  string
	dirty bool
	// saveMu orders the writes; saved is the document last written.
	saveMu sync.Mutex
	lock   *os.File // the state directory's flock, held until closeState
	// closed says closeState ran on a state file; owedAfterClose that a
	// purge was owed since (or while its last write ran), unwritten: flush
	// reports it. A purge settled since is not (the file then owes it
	// still, and a redelivery of a purge taken is answered at once).
	closed, owedAfterClose bool
	saved                  []byte
	saveErrors             atomic.Uint64
	failing                atomic.Bool // the last write failed (logged once until one succeeds)
}

// owe records p (id pid) as owed to peer and returns its number, for a
// late answer to settle. When the list is, or becomes, one purge of
// everything, the number returned names nothing: a late answer to this
// purge must not settle everything (a review's
// TestALateAnswerDoesNotSettleAnOwedPurgeOfEverything).
func (o *owedPurges) owe(peer string, p proxy.PurgeRequest, pid string, away []string, m *Metrics) uint64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.changedLocked()
	l := o.listLocked(peer)
	o.seq++
	if pid != "" {
		if _, dup := l.pids[pid]; dup {
			// Owed already (a notice naming a peer this node owes it
			// itself): owing it twice collapsed lists early (a review's
			// TestANoticeDoesNotOweAPurgeTwice).
			o.seq++
			return o.seq
		}
		if l.pids == nil {
			l.pids = map[string]struct{}{}
		}
		if len(l.pids) < 4*owedPerPeer {
			l.pids[pid] = struct{}{}
		}
	}
	o.owedAfterClose = o.owedAfterClose || o.closed // a purge owed after closeState: not written
	if len(l.purges) == 1 && l.purges[0].p == purgeEverything {
		// Already owed everything; a new number and id for it, so that
		// a delivery of it under way, which began before this purge,
		// neither settles it nor makes the peer take the next one as a
		// repeat (a review's TestAPurgeOwedWhileEverythingIsDeliveredIsKept).
		e := &l.purges[0]
		e.seq, e.pid, e.covers = o.seq, everythingID(e.pid, pid), time.Now()
		e.fold(pid, away, peer)
		o.seq++
		return o.seq
	}
	// At most sendersAwayMax named, as a delivery sends (sendPurge) and
	// the state file holds (a review's TestAPurgeWithManyPeersAwayIsOwedInAFileThatLoads).
	kept := withoutID(away, peer)
	l.purges = append(l.purges, owedPurge{seq: o.seq, p: p, pid: pid, away: kept[:min(len(kept), sendersAwayMax)]})
	o.addTotal(1)
	if len(l.purges) > owedPerPeer {
		o.addTotal(-(len(l.purges) - 1))
		o.seq++
		// Named by what it stands for, the purges from the list's first
		// to this one: every node that owes the peer the same run of
		// purges owes it the same purge of everything, which it then
		// runs once (a review's TestAPeerOwedEverythingByEveryNodeIsWipedOnce).
		e := collapsed(l.purges, o.seq, everythingID(l.purges[0].pid, pid), peer)
		l.purges = append(l.purges[:0], e)
		m.OwedPurgeEvents.WithLabelValues("collapsed").Inc()
		o.seq++
	}
	return o.seq
}

// addTotal changes the count of purges owed. o.mu must be held.
func (o *owedPurges) addTotal(n int) {
	o.total += n
	o.any.Store(o.total > 0)
}

// forgot keeps id owed purges for owedKeep from now (its peer was
// forgotten: forget.go).
func (o *owedPurges) forgot(id string, now time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.listLocked(id).forgotten = now
	o.changedLocked()
	o.trimLocked()
}

// listLocked is id's list, made if absent.
func (o *owedPurges) listLocked(id string) *owedList {
	if o.byPeer == nil {
		o.byPeer = map[string]*owedList{}
	}
	l := o.byPeer[id]
	if l == nil {
		l = &owedList{}
		o.byPeer[id] = l
	}
	return l
}

// trimLocked drops the lists of forgotten ids over owedTracked, those
// forgotten longest ago first; the lists of peers in the table are never
// dropped (a review's TestAPeerAwayKeepsItsOwedPurgesWhenManyIdsAreTracked).
func (o *owedPurges) trimLocked() {
	for {
		n := 0
		var oldest string
		for id, l := range o.byPeer {
			if l.forgotten.IsZero() {
				continue
			}
			n++
			if !l.delivering && (oldest == "" || l.forgotten.Before(o.byPeer[oldest].forgotten)) {
				oldest = id
			}
		}
		if n <= owedTracked || oldest == "" {
			return
		}
		o.addTotal(-len(o.byPeer[oldest].purges))
		delete(o.byPeer, oldest)
	}
}

// known marks id as in the peer table again (it came back).
func (o *owedPurges) known(id string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if l := o.byPeer[id]; l != nil && !l.forgotten.IsZero() {
		l.forgotten = time.Time{}
		o.changedLocked()
	}
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

// stillOwing is the ids in ids whose lists still hold x: a peer that took
// it since is not named again (a review's
// TestAStaleAwayListDoesNotOweAPeerThatTookThePurge). For a purge of
// everything, a list holds it if it still holds any purge x stands for
// (every list that is owed anything, when those are not known): each
// list collapses under an id of its own, from the purge it began at (a
// review's TestACollapsedPurgeNamesItsAwayPeersWhenTheListsBeganAtDifferentPurges).
func (o *owedPurges) stillOwing(x owedPurge, ids []string) []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	var out []string
	for _, id := range ids {
		l := o.byPeer[id]
		if l == nil {
			continue
		}
		if x.p == purgeEverything && len(l.purges) > 0 && (x.stands == nil || slices.ContainsFunc(x.stands, func(s string) bool { _, ok := l.pids[s]; return ok })) {
			out = append(out, id)
			continue
		}
		pid := x.pid
		_, standsFor := l.pids[pid]
		if slices.ContainsFunc(l.purges, func(x owedPurge) bool { return x.pid == pid || (x.p == purgeEverything && standsFor) }) {
			// A collapsed list stands for the purges owed before it and
			// not taken since, not for every purge (a review's
			// TestACollapsedListDoesNotNameAPeerForAPurgeItTook).
			out = append(out, id)
		}
	}
	return out
}

// owedTo is how many purges id is owed.
func (o *owedPurges) owedTo(id string) int {
	if !o.any.Load() {
		return 0
	}
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

// expire drops the lists of ids forgotten at least owedKeep ago, and the
// empty lists of peers in the table.
func (o *owedPurges) expire(now time.Time, m *Metrics) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for id, l := range o.byPeer {
		switch {
		case l.delivering:
		case !l.forgotten.IsZero() && now.Sub(l.forgotten) >= owedKeep:
			m.OwedPurgeEvents.WithLabelValues("expired").Add(float64(len(l.purges)))
			o.addTotal(-len(l.purges))
			delete(o.byPeer, id)
			o.changedLocked()
		case l.forgotten.IsZero() && len(l.purges) == 0 && !l.delivering:
			delete(o.byPeer, id)
			o.changedLocked()
		}
	}
}

// claim marks id's list as being delivered and returns what it holds
// (nothing, if empty, already being delivered or, unless the peer asked
// for it, not to be retried yet).
func (o *owedPurges) claim(id string, now time.Time, asked bool) []owedPurge {
	o.mu.Lock()
	defer o.mu.Unlock()
	l := o.byPeer[id]
	if l == nil || l.delivering || len(l.purges) == 0 || (now.Before(l.retryAt) && !asked) {
		return nil
	}
	l.delivering = true
	return append([]owedPurge(nil), l.purges...)
}

// settle removes the purge numbered seq from id's list (taken), if it is
// still there (a collapse may have replaced it), and reports whether the
// list is now empty.
func (o *owedPurges) settle(id string, seq uint64) (empty bool) {
	_, empty = o.settleFound(id, seq)
	return empty
}

// settleOne is settle, reporting whether seq was still owed (a list
// dropped or collapsed since holds it no more).
func (o *owedPurges) settleOne(id string, seq uint64) (found bool) {
	found, _ = o.settleFound(id, seq)
	return found
}

// settleFound is settle, and reports whether seq was still owed.
func (o *owedPurges) settleFound(id string, seq uint64) (found, empty bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	l := o.byPeer[id]
	if l == nil {
		return false, true
	}
	for i, x := range l.purges {
		if x.seq == seq {
			found = true
			l.purges = append(l.purges[:i], l.purges[i+1:]...)
			o.addTotal(-1)
			o.changedLocked()
			if x.p == purgeEverything {
				clear(l.pids) // everything it stood for is taken
			} else {
				delete(l.pids, x.pid)
			}
			break
		}
	}
	return found, len(l.purges) == 0
}

// release ends id's delivery; failed puts the next one owedRetry away.
func (o *owedPurges) release(id string, failed bool, now time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if l := o.byPeer[id]; l != nil {
		l.delivering = false
		if failed {
			l.retryAt = now.Add(owedRetry)
		}
	}
}

// purgeAnswer is what became of a purge sent to a peer.
type purgeAnswer int

const (
	answerTaken      purgeAnswer = iota // it ran there
	answerOwed                          // no answer, or one that says not now: owed
	answerIncomplete                    // it ran, but a file stayed on the peer's failing disk (its 500): reported, not owed (it ran)
	answerRefused                       // the peer will never take it (4xx): not owed
)

// sendPurge asks the peer at addr to purge p and says what became of it.
//
// pid names the purge (a peer that took it answers a repeat at once);
// redelivered marks an owed purge delivered late, which the peer does not
// owe on to others (the nodes that took it in its round owe it themselves:
// a review's TestARedeliveredPurgeIsNotOwedOnByThePeerItReaches).
//
// away names the peers the sender could not reach (at most
// sendersAwayMax, in the table): a node that takes the purge owes it to
// those of them it knows too.
//
// stands, for a purge of everything, names the purges it stands for (in
// the body, its digest in a signed field): a peer that took them all has
// nothing to wipe.
func (c *Cluster) sendPurge(ctx context.Context, to, addr string, p proxy.PurgeRequest, pid string, redelivered bool, away []string, covers time.Time, stands []string) purgeAnswer {
	// The sender's hold length goes with it: a peer holds at least as
	// long (its own peer_timeout may be shorter: purgehold.go).
	q := p.Query() + "&hold_ms=" + strconv.FormatInt(purgeHold(c.cfg.PeerTimeout).Milliseconds(), 10) + "&pid=" + url.QueryEscape(pid)
	if redelivered {
		q += "&owed=1"
	}
	if !covers.IsZero() {
		q += "&covers=" + strconv.FormatInt(covers.UnixNano(), 10)
	}
	if len(away) > 0 {
		q += "&away=" + url.QueryEscape(strings.Join(away[:min(len(away), sendersAwayMax)], ","))
	}
	var body io.Reader
	if len(stands) > 0 {
		body = strings.NewReader(strings.Join(stands, "\n"))
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, c.scheme+"://"+addr+"/_edge/purge?"+q, body)
	if len(stands) > 0 {
		req.Header.Set(hdrPurgeIDs, idsDigest(strings.Join(stands, "\n")))
	}
	resp, err := c.doWith(req, to, c.purgeHTTP, c.purgeTLS)
	if err != nil {
		return answerOwed
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusOK:
		return answerTaken
	case http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout, http.StatusTooManyRequests:
		return answerOwed
	case http.StatusInternalServerError:
		// The purge took effect at the peer but left a file on its
		// failing disk (the peer logs and counts that itself); sending it
		// again would not remove the file.
		return answerIncomplete
	}
	return answerRefused
}

// purgeTargets splits the peers, at one moment, into those a purge goes
// to now (trusted members) and those it is owed to (every other peer in
// the table, and forgotten ids still tracked), leaving out the ids in
// except (this node, the node that sent the purge here). One snapshot: a
// peer trusted again while a round waits is then owed it, not missed (a
// review's TestAPeerTrustedAgainDuringTheRoundIsOwedThePurge).
func (c *Cluster) purgeTargets(except map[string]bool) (send map[string]string, away []string) {
	tracked := c.owed.ids()
	send = map[string]string{}
	c.mu.Lock()
	defer c.mu.Unlock()
	for id, peer := range c.peers {
		switch {
		case except[id]:
		case peer.trusted && peer.member:
			send[id] = peer.Addr
		default:
			away = append(away, id)
		}
	}
	for _, id := range tracked {
		if _, inTable := c.peers[id]; !inTable && !except[id] && id != c.cfg.NodeID {
			away = append(away, id) // forgotten, but it may come back
		}
	}
	return send, away
}

// sendNotice names to the peer at addr, which took purge pid, the peers
// its round could not reach, for it to owe the purge to.
func (c *Cluster) sendNotice(ctx context.Context, to, addr string, p proxy.PurgeRequest, pid string, away []string) {
	q := p.Query() + "&pid=" + url.QueryEscape(pid) + "&owed=1&notice=1&away=" + url.QueryEscape(strings.Join(away[:min(len(away), sendersAwayMax)], ","))
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, c.scheme+"://"+addr+"/_edge/purge?"+q, nil)
	if resp, err := c.doWith(req, to, c.purgeHTTP, c.purgeTLS); err == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
}

// sendersAwayMax bounds the peers a purge names as away from its sender:
// a cluster with more missing at once than this has its other nodes' own
// views to count on.
const sendersAwayMax = 32

// withSendersAway adds to away the peers the sender named as away that
// are in this node's table (inTable), not the sender or this node.
func withSendersAway(away []string, named, sender, self string, inTable func(string) bool) []string {
	if named == "" {
		return away
	}
	for i, id := range strings.Split(named, ",") {
		if i == sendersAwayMax {
			break
		}
		if id != sender && id != self && !slices.Contains(away, id) && inTable(id) {
			away = append(away, id)
		}
	}
	return away
}

// membersAmong is the ids that are members in this node's table.
func (c *Cluster) membersAmong(ids []string) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for _, id := range ids {
		if p := c.peers[id]; p != nil && p.member {
			out = append(out, id)
		}
	}
	return out
}

// withoutAll is ids without those in drop (a new slice).
func withoutAll(ids, drop []string) []string {
	var out []string
	for _, x := range ids {
		if !slices.Contains(drop, x) {
			out = append(out, x)
		}
	}
	return out
}

// inTable reports whether id is in this node's peer table.
func (c *Cluster) inTable(id string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.peers[id]
	return ok
}

// withoutID is ids without id (a new slice).
func withoutID(ids []string, id string) []string {
	var out []string
	for _, x := range ids {
		if x != id {
			out = append(out, x)
		}
	}
	return out
}

// oweAll owes p (id pid) to every id in away, naming named (the peers its
// round could not reach) when it is delivered.
func (c *Cluster) oweAll(away []string, p proxy.PurgeRequest, pid string, named []string) {
	for _, id := range away {
		c.owed.owe(id, p, pid, named, c.metrics)
	}
	if len(away) > 0 {
		c.requestView()   // a peer owed purges leaves this node's routing view
		_ = c.flushOwed() // counted and logged; a purge's round reports it (FanOutPurge)
	}
}

// flushOwed writes what peers are owed to the state file, if it changed
// (owedstate.go), before a purge's answer goes: what the answer says is
// owed outlives a restart.
func (c *Cluster) flushOwed() error {
	err := c.owed.flush(true)
	c.noteOwedWrite(err)
	return err
}

// noteOwedWrite counts a failed write of the state file, and logs when
// writes begin to fail and when they succeed again (not every monitor
// round's retry).
func (c *Cluster) noteOwedWrite(err error) {
	if err != nil {
		c.owed.saveErrors.Add(1)
		c.metrics.OwedSaveErrors.Inc()
		if !c.owed.failing.Swap(true) {
			c.log.Error("owed purges not written: a restart now loses what changed (tried again at every change and monitor round)", "err", err)
		}
		return
	}
	if c.owed.failing.Load() && !c.owed.needsFlush() && c.owed.failing.Swap(false) {
		c.log.Info("owed purges written again")
	}
}

// redeliverPurges offers owed purges to the members this node trusts,
// each peer's in order, one request at a time, stopping at the first not
// taken; it also forgets the lists owed nothing that are done with. Run
// every monitor round: a peer trusted again gets what it is owed within
// a period.
func (c *Cluster) redeliverPurges(ctx context.Context, now time.Time) {
	c.owed.expire(now, c.metrics)
	if c.owed.needsFlush() {
		// A peer forgotten or back, lists expired, a write that failed:
		// written off the monitor loop (one at a time; the next round
		// tries again while one is going).
		go func() { c.noteOwedWrite(c.owed.flush(false)) }()
	}
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
		list := c.owed.claim(id, now, false)
		if len(list) == 0 {
			continue
		}
		go c.deliver(ctx, id, addr, list)
	}
}

// deliver sends peer id, at addr, the owed purges in list (claimed for it),
// in order, stopping at the first not taken, and ends the claim. It
// reports whether every one was settled (taken, refused or incomplete).
func (c *Cluster) deliver(ctx context.Context, id, addr string, list []owedPurge) (settled bool) {
	failed := false
	defer func() {
		c.owed.release(id, failed, time.Now())
		_ = c.flushOwed() // counted and logged
	}()
	for _, x := range list {
		// As long as a round waits for a late answer: a peer that
		// takes purges slowly is not tried again and again.
		rctx, cancel := context.WithTimeout(ctx, lateFactor*fanOutBound(c.cfg.PeerTimeout))
		answer := c.sendPurge(rctx, id, addr, x.p, x.pid, true, c.owed.stillOwing(x, x.away), x.covers, x.stands)
		cancel()
		switch answer {
		case answerOwed:
			failed = true
			c.metrics.OwedPurgeEvents.WithLabelValues("failed").Inc()
			return false
		case answerTaken:
			c.metrics.OwedPurgeEvents.WithLabelValues("delivered").Inc()
		case answerIncomplete:
			c.metrics.OwedPurgeEvents.WithLabelValues("incomplete").Inc()
		default:
			c.metrics.OwedPurgeEvents.WithLabelValues("refused").Inc()
		}
		if c.owed.settle(id, x.seq) {
			c.requestView() // owed nothing now: back in this node's routing view
		}
	}
	return true
}

// purgeIDs remembers the ids of the latest purges this node took from
// peers, so that a repeat (a redelivery of a purge taken after its round
// gave up on the answer, the same purge owed by several nodes) is
// answered at once and not run again.
type purgeIDs struct {
	mu      sync.Mutex
	seen    map[string]struct{}
	ring    [purgeIDsKept]string
	next    int
	running map[string]struct{} // being run now: a repeat meanwhile is not run again
	// wiped is when the latest purge of everything that has run here
	// began; wiping counts those running now.
	wiped  time.Time
	wiping int
}

// wipeState is what a purge of everything that covers owed purges finds.
type wipeState int

const (
	wipeNeeded  wipeState = iota // run it
	wipeCovered                  // a wipe that began since has run here: taken
	wipeRunning                  // a wipe is running: not taken yet (it may fail)
)

// wipeCheck says whether a purge of everything that covers purges owed up
// to covers must run here. A wipe counts once it has run, and one still
// running is no answer yet: a seventh review found a failed wipe, and one
// still under way, taken as done by the nodes that owed it
// (TestAFailedWipeDoesNotCoverTheWipeOwed,
// TestACoveredWipeIsNotAnsweredWhileTheWipeRuns).
func (s *purgeIDs) wipeCheck(covers time.Time) wipeState {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case covers.IsZero():
		return wipeNeeded
	case !s.wiped.IsZero() && covers.Add(maxSkew).Before(s.wiped):
		return wipeCovered // with the cluster's clock skew to spare
	case s.wiping > 0:
		return wipeRunning
	}
	return wipeNeeded
}

// wipeBegin marks a purge of everything running from now; call the
// returned func when it ends, with whether it ran.
func (s *purgeIDs) wipeBegin(now time.Time) (end func(ran bool)) {
	s.mu.Lock()
	s.wiping++
	s.mu.Unlock()
	return func(ran bool) {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.wiping--
		if ran && now.After(s.wiped) {
			s.wiped = now
		}
	}
}

// purgeState is what a node makes of a purge id that comes to it.
type purgeState int

const (
	purgeNew     purgeState = iota // not seen: run it
	purgeTaken                     // run here already: answered at once
	purgeRunning                   // being run now: not run again, and not taken yet
)

// start says what pid is here, and marks a new one running; done ends
// the run, recording it if it ran.
func (s *purgeIDs) start(pid string) purgeState {
	if pid == "" {
		return purgeNew
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.seen[pid]; ok {
		return purgeTaken
	}
	if _, ok := s.running[pid]; ok {
		// A slow purge is run once, however many nodes deliver it (a
		// review's TestASlowPurgeIsNotRunAgainByEveryNodeItWasNamedTo);
		// the repeat is not told it was taken, since the run may still
		// fail (a review's
		// TestARepeatAnsweredWhileTheFirstRunIsGoingDoesNotSettleAPurgeThatThenFails).
		return purgeRunning
	}
	if s.running == nil {
		s.running = map[string]struct{}{}
	}
	s.running[pid] = struct{}{}
	return purgeNew
}

// done ends pid's run; ran records it as taken.
func (s *purgeIDs) done(pid string, ran bool) {
	if pid == "" {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.running, pid)
	if ran {
		// In the same hold as the delete: a repeat waiting for this run
		// (the handler's poll) must see it running or taken, never
		// neither, or it runs it again (a review's
		// TestAWaiterDoesNotRunATakenPurgeAgain).
		s.recordLocked(pid)
	}
}

// hdrPurgeIDs carries the digest of a purge of everything's body, the ids
// of the purges it stands for: the request's MAC covers header fields,
// not the body, so the digest binds the body to it.
const hdrPurgeIDs = "Edge-Purge-Ids"

// idsDigest is the hex SHA-256 of a list of purge ids as sent.
func idsDigest(body string) string {
	sum := sha256.Sum256([]byte(body))
	return hex.EncodeToString(sum[:])
}

// readStands reads the ids a purge of everything stands for from r's
// body, checked against the signed digest; nil if there are none or they
// do not match (then the peer wipes).
func readStands(r *http.Request) []string {
	digest := r.Header.Get(hdrPurgeIDs)
	if digest == "" {
		return nil
	}
	b, err := io.ReadAll(io.LimitReader(r.Body, standsMax*64))
	if err != nil || idsDigest(string(b)) != digest {
		return nil
	}
	ids := strings.Split(string(b), "\n")
	if len(ids) > standsMax {
		return nil
	}
	return ids
}

// tookAll reports whether every id in ids was taken here.
func (s *purgeIDs) tookAll(ids []string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, id := range ids {
		if _, ok := s.seen[id]; !ok || id == "" {
			return false
		}
	}
	return len(ids) > 0
}

// purgeIDsKept is how many purge ids are remembered: more than one peer
// is owed (owedPerPeer) times a few owing nodes.
const purgeIDsKept = 4096

// record remembers pid as taken.
func (s *purgeIDs) record(pid string) {
	if pid == "" {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.recordLocked(pid)
}

// recordLocked is record with s.mu held.
func (s *purgeIDs) recordLocked(pid string) {
	if _, ok := s.seen[pid]; ok {
		return
	}
	if s.seen == nil {
		s.seen = make(map[string]struct{}, purgeIDsKept)
	}
	delete(s.seen, s.ring[s.next])
	s.ring[s.next] = pid
	s.next = (s.next + 1) % purgeIDsKept
	s.seen[pid] = struct{}{}
}
