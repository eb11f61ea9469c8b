package cluster

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/edgecache/edge/proxy"
)

// hopMode is what a peer request asks of the peer.
type hopMode int

const (
	hopProbe hopMode = iota + 1 // only-if-cached: answer from the store or 504
	hopClimb                    // a miss climbing the page's path: fetch on up the path
)

// hopModes are the modes' names on the wire (Edge-Mode) and in
// edge_peer_requests_total.
var hopModes = map[string]hopMode{"probe": hopProbe, "climb": hopClimb}

func (m hopMode) String() string {
	switch m {
	case hopProbe:
		return "probe"
	case hopClimb:
		return "climb"
	}
	return "unknown"
}

// route is what a peer request says about its place in a climb.
type route struct {
	mode      hopMode
	remaining []string // caches after this one, towards the origin
	rank      int      // tree rank this cache plays
	hop       int
	// order is the sending fill's place in the wait order (the zero
	// order, the oldest, from a sender that gives none or a bad one).
	order proxy.WaitOrder
}

// maxHops bounds a climb whatever the headers say (loop guard).
const maxHops = 16

// routeOf reads a data request's route; ok is false for one that is
// refused (no mode, more than maxHops hops).
func routeOf(h http.Header) (*route, bool) {
	rt := &route{mode: hopModes[h.Get(hdrMode)]}
	rt.rank, _ = strconv.Atoi(h.Get(hdrRank))
	rt.hop, _ = strconv.Atoi(h.Get(hdrHop))
	if p := h.Get(hdrPath); p != "" {
		rt.remaining = strings.Split(p, ",")
	}
	rt.order, _ = proxy.ParseWaitOrder(h.Get(hdrWait))
	if rt.hop > maxHops || rt.mode == 0 {
		return nil, false
	}
	return rt, true
}

// PeerHandler serves the cluster listener: signed data requests (probes and
// climbs, answered by the same caching handler as clients), indicator
// pulls and purge fan-out. Unsigned or badly signed requests get 403.
// serve answers a data request with what the cluster read of it (relayed
// by a peer, its route), which the proxy hands back to Fetch
// (proxy.FetchRequest.Route).
func (c *Cluster) PeerHandler(serve func(http.ResponseWriter, *http.Request, proxy.Inbound), purge func(proxy.PurgeRequest) (int, error)) http.Handler {
	r := chi.NewRouter()
	r.Use(c.authenticate)
	r.Get("/_edge/indicator", c.serveIndicator)
	r.Post("/_edge/owed", c.serveOwedPull)
	r.Post("/_edge/purge", func(w http.ResponseWriter, req *http.Request) {
		defer c.rounds.enter()() // what it owes is written before Close lets the directory go
		q := req.URL.Query()
		p := proxy.ParsePurgeQuery(q)
		pid := q.Get("pid")
		sender := req.Header.Get(hdrNode)
		// The peers its sender could not reach, which this node owes it
		// to if it knows them (a cut between the sender and one peer: a
		// review's TestAPurgeReachesAPeerCutOffOnlyFromTheSender); named
		// on every delivery, first or repeated.
		named := withSendersAway(nil, q.Get("away"), sender, c.cfg.NodeID, c.inTable)
		// A purge of everything's body is read before any wait: until a
		// request's body is read, its server does not watch for the
		// sender going, and a wait below would outlive it (a review's
		// TestAWipeWaiterEndsWithItsSender).
		var stands []string
		if p == purgeEverything {
			stands = readStands(req)
		}
		state := c.purgeIDs.start(pid)
		for state == purgeRunning && q.Get("notice") != "1" {
			// The same purge being run here (another node delivering
			// it: every node that took it owes it to one that was away,
			// and all deliver at once when it starts): waited for, so
			// that its end answers this one too. A 503 stopped the
			// sender's delivery there, and the rest of its list waited
			// for the next round while this node served (a review's
			// TestTwoPeersDeliveringTheSamePurgeAtAStartBothComplete).
			if !pollWait(req.Context()) {
				http.Error(w, "purge running", http.StatusServiceUnavailable)
				return
			}
			state = c.purgeIDs.start(pid)
		}
		switch state {
		case purgeRunning:
			// Not taken yet: the deliverer keeps it owed and tries again;
			// a notice's names are owed all the same.
			if q.Get("notice") == "1" {
				c.oweAll(named, p, pid, nil)
				return
			}
			http.Error(w, "purge running", http.StatusServiceUnavailable)
			return
		case purgeTaken:
			// Taken or being run already (a late answer's purge owed
			// again, another node's redelivery of it, a notice of peers
			// the round could not reach): answered at once, not run
			// again, so a peer slow to purge is neither wiped again nor
			// owed it for good (a review's
			// TestAPurgeSlowerThanTheLateBoundIsNotOwedForever). Only a
			// notice names peers to owe it to: a repeat's list may be
			// stale (a review's TestAStaleAwayListDoesNotOweAPeerThatTookThePurge).
			if q.Get("notice") == "1" {
				c.oweAll(named, p, pid, nil)
			}
			_, _ = w.Write([]byte("0"))
			return
		}
		ran := false
		defer func() { c.purgeIDs.done(pid, ran) }()
		if p == purgeEverything {
			var covers time.Time
			if ns, err := strconv.ParseInt(q.Get("covers"), 10, 64); err == nil {
				covers = time.Unix(0, ns)
			}
			// Taken without a wipe, the peers it names are owed it all
			// the same, as a notice's are (a review's
			// TestACoveredPurgeOfEverythingStillOwesThePeersItNames).
			if c.purgeIDs.tookAll(stands) {
				ran = true // every purge it stands for was taken here: nothing to wipe
				c.oweAll(named, p, pid, nil)
				_, _ = w.Write([]byte("0"))
				return
			}
			ws := c.purgeIDs.wipeCheck(covers)
			for ws == wipeRunning {
				// Another wipe running here: waited for, as a purge
				// running is (above); it may cover this one.
				if !pollWait(req.Context()) {
					http.Error(w, "purge running", http.StatusServiceUnavailable) // kept owed: tried again
					return
				}
				ws = c.purgeIDs.wipeCheck(covers)
			}
			switch ws {
			case wipeCovered:
				ran = true // a wipe begun here since covers every purge it stands for
				c.oweAll(named, p, pid, nil)
				_, _ = w.Write([]byte("0"))
				return
			}
			end := c.purgeIDs.wipeBegin(time.Now())
			defer func() { end(ran) }()
		}
		// Who this node owes it to is read as the purge comes, not when
		// it has run (seconds for a prefix over a large disk): a peer
		// trusted again meanwhile is owed it, not missed (a review's
		// TestAPeerTrustedAgainDuringTheReceiversPurgeIsOwedIt).
		_, away := c.purgeTargets(map[string]bool{sender: true, c.cfg.NodeID: true})
		c.holdForPeersPurge(p, q.Get("hold_ms")) // before the purge: purgehold.go
		n, err := purge(p)
		if err == nil || errors.Is(err, proxy.ErrPurgeIncomplete) {
			// Recorded once it has run (a purge that failed here is run
			// again when it comes again: a review's
			// TestAPurgeThatFailedAtThePeerIsNotSkippedWhenRedelivered).
			ran = true
			if q.Get("owed") == "" {
				// Owed to the peers this node knows are away too, but
				// not to the sender; a redelivered purge is owed on only
				// to the peers it names: the nodes that took it in its
				// round owe it to theirs themselves.
				named = append(named, withoutAll(away, named)...)
			}
			c.oweAll(named, p, pid, nil)
		}
		if errors.Is(err, proxy.ErrPurgeIncomplete) {
			// Taken effect here, a file left on a failing disk: not
			// counted as purged by the sender.
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		_, _ = w.Write([]byte(strconv.Itoa(n)))
	})
	r.Handle("/*", http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if !sameKeyVersion(req.Header, false) {
			c.metrics.PeerRejected.WithLabelValues("key_version").Inc()
			http.Error(w, "this node keys pages under another cache-key version", http.StatusServiceUnavailable)
			return
		}
		rt, ok := routeOf(req.Header)
		if !ok {
			c.metrics.PeerRejected.WithLabelValues("loop").Inc()
			http.Error(w, "bad route", http.StatusLoopDetected)
			return
		}
		if c.cfg.SiteOf != nil && !c.sameSite(req.Header, c.cfg.SiteOf(req.Host)) {
			// A 5xx: the asker skips this hop (a probe's is lost) and goes
			// on to its own origin, under its own site.
			c.metrics.PeerRejected.WithLabelValues("site").Inc()
			http.Error(w, "this node keys the host under another site", http.StatusServiceUnavailable)
			return
		}
		c.metrics.PeerRequests.WithLabelValues(rt.mode.String()).Inc()
		// An authenticated peer is a trusted proxy: the forwarding fields it
		// wrote for its client are kept, and TLS on the peer hop
		// (cluster.tls) is not the client's, so the cache key's scheme is
		// the one every node computes for the page.
		serve(w, req, proxy.Inbound{Relayed: true, Route: rt})
	}))
	return r
}

func (c *Cluster) authenticate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if reason := c.peerAuth.verify(r, time.Now()); reason != "" {
			c.metrics.PeerRejected.WithLabelValues(reason).Inc()
			http.Error(w, "forbidden", http.StatusForbidden)
			return
		}
		dropUnsigned(r.Header)
		sw := newSigningWriter(w, r, c.cfg.Secret)
		defer sw.finish()
		next.ServeHTTP(sw, r)
	})
}

// purgeRunningPoll is how often a request waiting for a purge's run here
// (the same purge, a wipe, a delivery under way) looks again.
const purgeRunningPoll = 5 * time.Millisecond

// pollWait waits purgeRunningPoll, or reports false if ctx ends first.
func pollWait(ctx context.Context) bool {
	select {
	case <-ctx.Done():
		return false
	case <-time.After(purgeRunningPoll):
		return true
	}
}

// FanOut is what became of a purge sent round the peers: how many took it
// now, and how many it is owed to (suspected, gone or not answering:
// delivered when they are trusted again, purgeowed.go).
type FanOut struct {
	Purged int `json:"peers_purged"`
	Owed   int `json:"peers_owed"`
	// Incomplete peers ran it but left a file on a failing disk (their
	// 500): not owed, since sending it again would not remove the file;
	// the operator is told, as for this node's own disk.
	Incomplete int `json:"peers_incomplete"`
	// NotSaved says what is owed could not be written to cluster.state_dir
	// (its disk full, gone or read-only): a restart of this node loses it,
	// so the operator is told (a 500), as for an incomplete purge.
	NotSaved error `json:"-"`
	// Refused peers answered, signed, that they will not take it (a 4xx:
	// a purge their version or configuration cannot read). Not owed
	// (sending it again gets the same answer), not one that took it (it
	// is not named the peers that missed it), and the operator is told:
	// such a peer may still serve what the purge names.
	Refused int `json:"peers_refused"`
}

// FanOutPurge sends a purge to every trusted peer at once, and owes it to
// the peers it could not send it to, or that did not take it in time (a
// late answer that took it settles it: purgeowed.go).
func (c *Cluster) FanOutPurge(ctx context.Context, p proxy.PurgeRequest) FanOut {
	defer c.rounds.enter()() // Close waits for the round: what it owes is written
	pid := newPurgeID()
	type target struct {
		id, addr string
		mu       sync.Mutex
		done     bool   // answered (taken or not)
		refused  bool   // answered that it will not take it
		owedSeq  uint64 // owed by the round (0: not owed), settled if a late answer takes it
	}
	sendTo, away := c.purgeTargets(map[string]bool{c.cfg.NodeID: true})
	// The peers it is away from go with the purge: a node that reaches
	// one of them owes it too (a cut between this node and one peer only).
	// Members it cannot reach, not peers that left (every node sees
	// those as away itself), so that the bounded list names the cut
	// ones (a review's TestTheSendersAwayListNamesAPeerCutOffFromItAmongManyDeparted).
	awayInTable := c.membersAmong(away)
	c.oweAll(away, p, pid, awayInTable)
	var send []*target
	for id, addr := range sendTo {
		send = append(send, &target{id: id, addr: addr})
	}
	var ok, owedNow, incomplete, refused atomic.Int64
	var wg sync.WaitGroup
	// All at once: until the last peer has purged, the first ones keep no
	// peer's page (purgehold.go), for a window that must cover the round.
	// The round waits fanOutBound for each, so that a peer's hold
	// outlasts it: a peer that answers later counts as not purged now and
	// is owed it, settled if its late answer (up to lateFactor times the
	// bound) took it. Not cut short by the caller (an admin client that
	// gives up): the peers that have the request purge anyway, and this
	// node's hold must last until they have.
	round := time.NewTimer(fanOutBound(c.cfg.PeerTimeout))
	defer round.Stop()
	lateCtx, cancelLate := context.WithTimeout(context.WithoutCancel(ctx), lateFactor*fanOutBound(c.cfg.PeerTimeout))
	answered := make(chan struct{}, len(send))
	// Every peer that took it, in the round or by a late answer, is named
	// every peer whose purge failed with no answer to come, in the round or
	// late, whichever came first: under load the peers that take it may all
	// answer late (a CI run's TestAPeerWhoseLateAnswerNeverComesIsNamedToTheOthers,
	// where C took it late and B's late failure was named to nobody).
	// Filled once the round is over (tookReady).
	var names struct {
		sync.Mutex
		took   []*target
		failed []string
	}
	tell := func(to []*target, ids []string) {
		if len(to) == 0 || len(ids) == 0 {
			return
		}
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), fanOutBound(c.cfg.PeerTimeout))
		defer cancel()
		var notices sync.WaitGroup
		for _, t := range to {
			notices.Go(func() { c.sendNotice(ctx, t.id, t.addr, p, pid, ids) })
		}
		notices.Wait()
	}
	tookReady := make(chan struct{})
	for _, t := range send {
		wg.Go(func() {
			answer := c.sendPurge(lateCtx, t.id, t.addr, p, pid, false, awayInTable, time.Time{}, nil)
			taken, owed := answer == answerTaken || answer == answerIncomplete, answer == answerOwed
			t.mu.Lock()
			t.done = true
			seq := t.owedSeq
			if seq == 0 {
				switch answer {
				case answerTaken:
					ok.Add(1)
				case answerIncomplete:
					incomplete.Add(1)
				case answerOwed:
					t.owedSeq = c.owed.owe(t.id, p, pid, awayInTable, c.metrics)
					owedNow.Add(1)
					c.requestView()
				case answerRefused:
					t.refused = true
					refused.Add(1)
				}
			}
			t.mu.Unlock()
			if answer == answerRefused {
				c.log.Warn("a peer refused a purge: it may still serve what the purge names", "peer", t.id, "url", p.URL, "prefix", p.Prefix, "tag", p.Tag, "late", seq != 0)
			}
			if seq != 0 && answer == answerRefused && c.owed.settleOne(t.id, seq) {
				// Late, as a redelivery's refusal is: not owed (sending it
				// again gets the same answer), not one that took it.
				c.metrics.OwedPurgeEvents.WithLabelValues("refused").Inc()
				c.requestView()
			}
			if seq != 0 && taken && c.owed.settle(t.id, seq) {
				if answer == answerIncomplete {
					// The purge's answer has gone: reported here, as a
					// redelivery's is (a review's
					// TestALateIncompleteAnswerIsReported).
					c.metrics.OwedPurgeEvents.WithLabelValues("incomplete").Inc()
					c.log.Warn("a late peer answer: purge incomplete (a file stayed on its failing disk)", "peer", t.id, "url", p.URL, "prefix", p.Prefix, "tag", p.Tag)
				}
				c.requestView() // the late answer took it: owed nothing now
			}
			if seq != 0 && (owed || taken) {
				<-tookReady
				names.Lock()
				var to []*target
				var ids []string
				if owed {
					// Its late answer failed: named to the peers that took
					// it, as one that failed within the round is (a
					// review's TestAPeerWhoseLateAnswerNeverComesIsNamedToTheOthers).
					names.failed = append(names.failed, t.id)
					to, ids = slices.Clone(names.took), []string{t.id}
				} else {
					// It took it late: named the peers that failed so far.
					names.took = append(names.took, t)
					to, ids = []*target{t}, slices.Clone(names.failed)
				}
				names.Unlock()
				tell(to, ids)
			}
			answered <- struct{}{}
			if seq != 0 {
				_ = c.flushOwed() // a late answer settled or owed it (counted and logged)
			}
		})
	}
	go func() { wg.Wait(); cancelLate() }()
wait:
	for range send {
		select {
		case <-answered:
		case <-round.C:
			break wait
		}
	}
	var took []*target
	var missedIDs []string
	for _, t := range send {
		t.mu.Lock()
		if !t.done && t.owedSeq == 0 {
			// Not answered yet: owed, settled if its late answer takes
			// it; not named to the others, who could not settle it (a
			// slow peer wiped by them: a review's
			// TestASlowPeerIsNotWipedByTheNodeItWasNamedTo).
			t.owedSeq = c.owed.owe(t.id, p, pid, awayInTable, c.metrics)
			owedNow.Add(1)
			c.requestView()
		} else if t.owedSeq != 0 {
			missedIDs = append(missedIDs, t.id) // failed outright: no answer will settle it
		} else if t.done && !t.refused {
			took = append(took, t)
		}
		t.mu.Unlock()
	}
	names.Lock()
	names.took = append(names.took, took...)
	names.failed = append(names.failed, missedIDs...)
	names.Unlock()
	close(tookReady)
	// The peers the round could not reach are named to those that took
	// it, which owe it to them too: this node may be cut off from them for
	// longer than its own redelivery can wait (a review's
	// TestAPurgeAPeerDidNotAnswerReachesItThroughTheOthers). Before the
	// purge returns, so that its answer is true of the cluster; bounded as
	// the round was.
	tell(took, missedIDs)
	// What the answer says is owed outlives a restart, or the answer says
	// it does not.
	notSaved := c.flushOwed()
	return FanOut{Purged: int(ok.Load()), Owed: int(owedNow.Load()) + len(away), Incomplete: int(incomplete.Load()), Refused: int(refused.Load()), NotSaved: notSaved}
}
