package cluster

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// A node that starts again asks its peers for what they owe it before it
// serves a client. Delivery otherwise waits for a peer to trust it again
// (its first heartbeats, then a monitor round): a node that was down
// during a purge served the purged pages from its disk tier to its own
// clients until then. The node's cluster listener and heartbeats run
// first; its public listener accepts connections (they wait in the
// kernel's queue) but serves none until every peer in its table has
// answered, refused the connection, or the bound (pullBound) has passed;
// /readyz says "starting" meanwhile. A peer asked delivers what it owes at
// once, whatever it thinks of the asker's liveness (the asker is
// evidently up), and answers when it has, so the purges have run here
// before the first request does. With cluster.dns the asking waits for
// the first join (within the same bound), so the peers found by name are
// asked. A peer membership brings in after the start's asking has ended
// (learnt by gossip, or back from an agreed death: a partition long
// enough for each side to declare the other dead, after which the
// heartbeat path's silence rule no longer applies, since the peer was not
// a member) is asked too, without holding clients.
//
// A node that was not restarted but stopped (SIGSTOP, a stalled VM) or cut
// off during a purge asks the same way, without waiting to serve, each
// peer it hears again after a silence long enough to refute a suspicion
// (the heartbeat path's wantRefute): the peer delivers at once rather than
// when it trusts this node again and its monitor next runs.

// pullBound is how long a start waits for its peers' deliveries: as long
// as a purge's round waits for its peers (2.5 s at the default peer
// timeout). A peer that hangs (stopped, its process wedged) costs a start
// this much, so it is kept short; a delivery cut short by it fails and is
// made as before, when the peer trusts this node again. (A purge's late
// bound, four times this, made a start wait 10.5 s behind a stopped peer:
// TestAnOwedPurgeOutlivesACrashOfTheNodeThatOwesIt.)
func pullBound(peerTimeout time.Duration) time.Duration {
	return fanOutBound(peerTimeout)
}

// When a peer is asked (edge_purge_owed_pulls_total's when).
const (
	askAtStart      = "start"   // before this node served (CollectOwed)
	askAfterSilence = "silence" // its heartbeats came back after a silence (askLoop)
	askJoined       = "joined"  // membership brought it in, new or back from an agreed death (askLoop)
)

// Outcomes of asking a peer (edge_purge_owed_pulls_total).
const (
	pullDelivered   = "delivered"   // it owed purges and delivered them
	pullNothing     = "nothing"     // it owed nothing
	pullUnreachable = "unreachable" // no answer (down, refused, timed out)
	pullFailed      = "failed"      // it answered that it could not deliver them all
	pullDropped     = "dropped"     // not asked: the queue was full (it delivers when it trusts this node again)
)

// PullSummary is what a start's asking came to, for the status page
// (Pulled is nil until it has ended).
type PullSummary struct {
	Asked    int            `json:"asked"`
	Outcomes map[string]int `json:"outcomes"`
	Purges   int            `json:"purges"` // delivered in all
	TookMs   float64        `json:"took_ms"`
}

// CollectOwed asks every peer in the table, at once, to deliver what it
// owes this node, and returns when each has answered or the bound passed.
func (c *Cluster) CollectOwed(ctx context.Context) PullSummary {
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, pullBound(c.cfg.PeerTimeout))
	defer cancel()
	if c.cfg.DNS != "" {
		// Peers found by name are in the table once this node has
		// joined (its first seeds resolved and one answered): waited
		// for within the same bound, or a DNS-discovered cluster (the
		// Kubernetes StatefulSet) asked nobody (a review's finding).
		select {
		case <-c.firstJoin:
		case <-ctx.Done():
		}
	}
	targets := map[string]string{}
	c.mu.Lock()
	for id, p := range c.peers {
		if p.Addr != "" && id != c.cfg.NodeID {
			targets[id] = p.Addr
		}
	}
	c.mu.Unlock()
	sum := PullSummary{Asked: len(targets), Outcomes: map[string]int{}}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for id, addr := range targets {
		wg.Go(func() {
			outcome, n := c.askForOwed(ctx, id, addr)
			c.metrics.OwedPulls.WithLabelValues(askAtStart, outcome).Inc()
			mu.Lock()
			sum.Outcomes[outcome]++
			sum.Purges += n
			mu.Unlock()
		})
	}
	wg.Wait()
	sum.TookMs = float64(time.Since(start).Microseconds()) / 1000
	c.pulled.Store(&sum) // membership asks the peers it brings in from now on (memberUp)
	// And those it brought in while this asked (a seed's gossip: with a
	// few seeds in cluster.peers, most of the cluster is learnt now) are
	// asked the same way, not holding clients (a review's
	// TestOwedReviewAPeerLearntWhileTheStartAsksIsAskedToo). One learnt in
	// both windows is asked once: askLoop skips a repeat within its bound.
	c.mu.Lock()
	var learnt []string
	for id, p := range c.peers {
		if _, asked := targets[id]; !asked && p.Addr != "" && id != c.cfg.NodeID {
			learnt = append(learnt, id)
		}
	}
	c.mu.Unlock()
	for _, id := range learnt {
		c.wantOwedFrom(id, askJoined)
	}
	if sum.Purges > 0 || sum.Outcomes[pullFailed] > 0 {
		c.log.Info("purges owed to this node, asked for at start", slog.Int("peers", sum.Asked), slog.Int("delivered", sum.Purges),
			slog.Int("failed", sum.Outcomes[pullFailed]), slog.Int("unreachable", sum.Outcomes[pullUnreachable]), slog.Duration("took", time.Since(start)))
	}
	return sum
}

// askForOwed asks one peer to deliver what it owes this node.
func (c *Cluster) askForOwed(ctx context.Context, id, addr string) (outcome string, purges int) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, c.scheme+"://"+addr+"/_edge/owed", nil)
	resp, err := c.doWith(req, id, c.purgeHTTP, c.purgeTLS)
	if err != nil {
		return pullUnreachable, 0
	}
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64))
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return pullFailed, 0
	}
	n, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	if n > 0 {
		return pullDelivered, n
	}
	return pullNothing, 0
}

// serveOwedPull delivers, now, what this node owes the asking peer, and
// answers how many purges it delivered (503 if one was not taken: the
// rest stay owed, delivered as before).
func (c *Cluster) serveOwedPull(w http.ResponseWriter, req *http.Request) {
	asker := req.Header.Get(hdrNode)
	addr := c.peerAddr(asker)
	if addr == "" {
		// Not in this node's table: it owes it nothing it could deliver
		// (a forgotten id's purges wait for it to be learnt again).
		_, _ = w.Write([]byte("0"))
		return
	}
	delivered := 0
	for c.owed.owedTo(asker) > 0 {
		list := c.owed.claim(asker, time.Now(), true)
		if list == nil {
			// A delivery under way (the monitor's): wait for it.
			if !pollWait(req.Context()) {
				http.Error(w, "delivery not finished", http.StatusServiceUnavailable)
				return
			}
			continue
		}
		if !c.deliver(req.Context(), asker, addr, list) {
			http.Error(w, "a purge was not taken", http.StatusServiceUnavailable)
			return
		}
		delivered += len(list)
	}
	_, _ = w.Write([]byte(strconv.Itoa(delivered)))
}

// deliverOwedNow delivers what peer id is owed, at once, as an ask from it
// would (membership brought it in: memberUp). Nothing happens when it is
// owed nothing or a delivery to it is under way; what fails stays owed.
func (c *Cluster) deliverOwedNow(id string) {
	addr := c.peerAddr(id)
	if addr == "" {
		return
	}
	if list := c.owed.claim(id, time.Now(), true); list != nil {
		c.deliver(c.life, id, addr, list) // each purge bounded as a round's late answer is; Close ends it
	}
}

// Pulled is the start's asking for owed purges (nil before it ended).
func (c *Cluster) Pulled() *PullSummary { return c.pulled.Load() }

// owedAsk is a peer to ask for what it owes this node, and why
// (edge_purge_owed_pulls_total's when).
type owedAsk struct{ id, when string }

// wantOwedFrom queues peer id to be asked for what it owes this node
// (askLoop); dropped when the queue is full, and counted so (the peer
// delivers as before, once it trusts this node again): the caller is a
// heartbeat or membership callback, which must not wait.
func (c *Cluster) wantOwedFrom(id, when string) {
	select {
	case c.owedAsks <- owedAsk{id, when}:
	default:
		c.metrics.OwedPulls.WithLabelValues(when, pullDropped).Inc()
	}
}

// askLoop asks the peers wantOwedFrom queued, one at a time, each within
// pullBound, until ctx ends. A peer asked within the last pullBound is
// not asked again (a cut healing brings every peer's heartbeats back at
// once, and a flapping link the same peer again and again).
func (c *Cluster) askLoop(ctx context.Context) {
	last := map[string]time.Time{}
	for {
		var ask owedAsk
		select {
		case <-ctx.Done():
			return
		case ask = <-c.owedAsks:
		}
		id := ask.id
		if at, ok := last[id]; ok && time.Since(at) < pullBound(c.cfg.PeerTimeout) {
			continue
		}
		last[id] = time.Now()
		if len(last) > 4096 {
			clear(last)
		}
		addr := c.peerAddr(id)
		if addr == "" {
			continue
		}
		actx, cancel := context.WithTimeout(ctx, pullBound(c.cfg.PeerTimeout))
		outcome, n := c.askForOwed(actx, id, addr)
		cancel()
		c.metrics.OwedPulls.WithLabelValues(ask.when, outcome).Inc()
		if n > 0 {
			c.log.Info("purges owed to this node, delivered when asked", slog.String("peer", id), slog.String("when", ask.when), slog.Int("delivered", n))
		}
	}
}

// peerAddr is peer id's address in this node's table ("" if not there).
func (c *Cluster) peerAddr(id string) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if p := c.peers[id]; p != nil {
		return p.Addr
	}
	return ""
}
