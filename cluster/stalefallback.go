package cluster

import (
	"context"
	"math/bits"
	"sync"
	"time"

	"github.com/edgecache/edge/proxy"
)

// A probe's stale answer is no win (recordAnswer): a probe never refreshes
// what it reads, so a stale copy served from it would stay stale where it
// is, and the request climbs instead. The stale copies the probes saw are
// still what the site allowed to be served (stale-while-revalidate), so
// they stand by while the request climbs:
//
//   - When the climb fails (the origin is down, every hop refused), serving
//     one beats a 502 (a review's test,
//     TestS47StaleProbeAnswerTurnsIntoAnErrorWhenTheOriginIsDown).
//   - With Config.StaleWhileClimbing, they are asked again as soon as the
//     climb sets off, and the first of the two to answer is served: a
//     single cache holding the stale copy would serve it at once and
//     refresh it in the background (RFC 5861), and the cluster does the
//     same, the climb being the refresh. It goes on after a stale copy was
//     served, at the hop it reached (fills run on without their client), so
//     the page's home holds it fresh for the next request. Only when the
//     climb's first hop, the page's home, asked with the probes, had no
//     fresh copy, and never for a revalidation (mayServeStaleEarly).
//
// The probe answers themselves were closed long before (holding a peer's
// answer open for the length of a climb would hold its connection too), so
// the peers that answered stale are asked again, only-if-cached, and the
// first answer from a store, stale or not, is served.

// staleFallback asks cs's peers that answered stale again, and returns the
// first that answers the page from its store; ok is false when none was
// stale or none answers it now, and outcome says why, as
// edge_peer_stale_fallbacks_total counts it (the caller counts; "" when no
// peer was there to ask). res is the peer's answer as settled: its Keep is
// the caller's. It serves nothing a purge may have named
// since the request's fetch began (mark; a review's
// TestS48StaleFallbackServesAPagePurgedWhileTheClimbWasOut: the purge
// reached the home, not X, and X's copy was served after the purge had
// returned), and asks no peer that is suspected or owes purges now.
func (c *Cluster) staleFallback(ctx context.Context, fr proxy.FetchRequest, cs *candidateSet, mark holdMark) (res proxy.Result, ok bool, outcome string) {
	mask := c.stillAskable(cs, cs.staleAt.Load())
	if mask == 0 {
		return proxy.Result{}, false, "" // nobody to ask: not counted (a review's TestS49NoStaleSeenIsCountedAsAStaleFallback)
	}
	if !c.copies.keepable(mark, fr.Key, nil, 0, time.Now()) {
		return proxy.Result{}, false, "purged"
	}
	pctx, cancel := context.WithCancel(ctx)
	answers := make(chan probeAnswer, bits.OnesCount64(mask))
	sent := c.sendProbesOn(pctx, answers, fr.Req, fr.Key, cs.peers, mask)
	outcome = "none"
	for got := 1; got <= sent; got++ {
		a := <-answers
		if !fromStore(a.resp) {
			if a.resp != nil {
				a.resp.Body.Close()
			}
			continue
		}
		if !c.copies.keepable(mark, fr.Key, a.resp.Header, peerAge(proxy.Result{Resp: a.resp}), time.Now()) {
			// A purge naming it went round while it was asked.
			a.resp.Body.Close()
			go closeAnswers(answers, sent-got, cancel)
			return proxy.Result{}, false, "purged"
		}
		release := afterAll(2, cancel)
		a.resp.Body = &cancelOnClose{ReadCloser: a.resp.Body, cancel: release}
		go closeAnswers(answers, sent-got, release)
		if res, ok := c.settle(ctx, fr, a.resp, cs.ids[a.i]); ok {
			return res, true, "served"
		}
		break // its body failed before a byte was sent
	}
	cancel()
	if ctx.Err() != nil {
		outcome = "cancelled" // the request ended first
	}
	return proxy.Result{}, false, outcome
}

// staleOnFailure is the fallback of a climb that failed: a stale copy a
// probe saw, asked again, or the climb's error.
func (c *Cluster) staleOnFailure(ctx context.Context, fr proxy.FetchRequest, kh uint64, isHome bool, cs *candidateSet, mark holdMark, climbErr error) (proxy.Result, error) {
	res, ok, outcome := c.staleFallback(ctx, fr, cs, mark)
	c.countStaleFallback(outcome)
	if !ok {
		return proxy.Result{}, climbErr
	}
	c.races.staleServed.Add(1)
	return c.fallbackResult(fr, kh, isHome, res), nil
}

// fallbackResult finishes a stale copy served because the climb failed:
// kept as a probe's answer is, but by a revalidation of a copy this node
// holds never (a peer's stale copy is no refresh of it; served, it still
// beats an error where this node's own copy may no longer be served:
// review_s51).
func (c *Cluster) fallbackResult(fr proxy.FetchRequest, kh uint64, isHome bool, res proxy.Result) proxy.Result {
	if fr.Revalidates {
		res.Keep = false
		return res
	}
	return c.probeResult(kh, isHome, res)
}

// countStaleFallback counts an outcome of asking stale peers again ("":
// none was asked).
func (c *Cluster) countStaleFallback(outcome string) {
	if outcome != "" {
		c.metrics.StaleFallbacks.WithLabelValues(outcome).Inc()
	}
}

// servedEarly finishes a stale copy served while its climb is out. It is
// not kept here: this node's store would then hold it stale, and a
// refresh of its own could take the same stale copy again. The climb
// (done) runs on; its answer is closed unread, and if this node made it
// (its own origin fetch: the climb's hops failed, or it became the page's
// home) nothing kept the refresh, so the next request for the page here
// climbs without a stale copy beside it (staleOwed).
func (c *Cluster) servedEarly(kh uint64, res proxy.Result, done <-chan proxy.Result) proxy.Result {
	go func() {
		cl := <-done
		if cl.Resp == nil {
			return
		}
		if cl.From != proxy.UpstreamPeer {
			c.staleOwed.add(kh)
		}
		cl.Resp.Body.Close()
	}()
	c.metrics.StaleFallbacks.WithLabelValues("served_early").Inc()
	c.races.staleServedEarly.Add(1)
	res.Keep = false
	return res
}

// refreshOwed is the pages whose refresh a stale copy served early threw
// away (servedEarly): their next request climbs without one. Bounded: when
// full it starts again (a page forgotten only costs another early copy).
type refreshOwed struct {
	mu    sync.Mutex
	pages map[uint64]struct{}
}

const refreshOwedMax = 4096

func (o *refreshOwed) add(kh uint64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.pages == nil || len(o.pages) >= refreshOwedMax {
		o.pages = make(map[uint64]struct{})
	}
	o.pages[kh] = struct{}{}
}

// take reports whether kh was owed a refresh, and forgets it.
func (o *refreshOwed) take(kh uint64) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	_, ok := o.pages[kh]
	delete(o.pages, kh)
	return ok
}

// staleBeside is what a request climbs with when a probe found the page
// stale and Config.StaleWhileClimbing is on: the climb and the peers that
// answered stale, asked again, race, and the first answer is served (a
// failed climb waits for the stale copy, a stale copy not there now waits
// for the climb). A stale copy served first leaves the climb running: its
// hop refreshes the page for the next request; its answer here is closed
// unread (edge_peer_stale_fallbacks_total's served_early). A climb that
// answers first ends the peers' asking (climb_first).
func (c *Cluster) staleBeside(ctx context.Context, fr proxy.FetchRequest, kh uint64, isHome bool, cs *candidateSet, mark holdMark, climb func() (proxy.Result, error)) (proxy.Result, error) {
	type climbAnswer struct {
		res proxy.Result
		err error
	}
	type staleAnswer struct {
		res     proxy.Result
		ok      bool
		outcome string
	}
	climbed := make(chan climbAnswer, 1)
	go func() {
		res, err := climb()
		climbed <- climbAnswer{res, err}
	}()
	sctx, cancelStale := context.WithCancel(ctx)
	staled := make(chan staleAnswer, 1)
	go func() {
		res, ok, outcome := c.staleFallback(sctx, fr, cs, mark)
		staled <- staleAnswer{res, ok, outcome}
	}()
	select {
	case cl := <-climbed:
		if cl.err == nil {
			cancelStale()
			go func() { // a stale copy settled meanwhile is not served
				if s := <-staled; s.ok {
					s.res.Resp.Body.Close()
				}
			}()
			c.metrics.StaleFallbacks.WithLabelValues("climb_first").Inc()
			return cl.res, nil
		}
		s := <-staled
		c.countStaleFallback(s.outcome)
		if !s.ok {
			cancelStale()
			return proxy.Result{}, cl.err
		}
		// As below: the stale answer's body streams under sctx (a copy
		// larger than cluster.peer_whole_bytes), so sctx ends with it,
		// not here (cancelled here, the copy was cut mid-body: a review's
		// TestS53StaleWhileClimbingFailedClimbCutsTheStaleBody).
		s.res.Resp.Body = &cancelOnClose{ReadCloser: s.res.Resp.Body, cancel: cancelStale}
		c.races.staleServed.Add(1)
		return c.fallbackResult(fr, kh, isHome, s.res), nil
	case s := <-staled:
		if !s.ok {
			// No stale copy now (or a purge named the page): the climb's
			// answer or error is the request's.
			cancelStale()
			c.countStaleFallback(s.outcome)
			cl := <-climbed
			return cl.res, cl.err
		}
		// cancelStale ends with the stale answer's body: it was made under
		// sctx (staleFallback's settle), which must outlive this return.
		s.res.Resp.Body = &cancelOnClose{ReadCloser: s.res.Resp.Body, cancel: cancelStale}
		late := make(chan proxy.Result, 1) // the climb's answer (Resp nil if it failed)
		go func() {
			if cl := <-climbed; cl.err == nil {
				late <- cl.res
			} else {
				late <- proxy.Result{}
			}
		}()
		return c.servedEarly(kh, s.res, late), nil
	}
}

// stillAskable keeps of mask the entries of cs whose peers are trusted
// and owe no purge now, as candidates keeps them.
func (c *Cluster) stillAskable(cs *candidateSet, mask uint64) uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	for m := mask; m != 0; m &= m - 1 {
		i := bits.TrailingZeros64(m)
		if !c.mayAskLocked(cs.peers[i]) {
			mask &^= 1 << uint(i)
		}
	}
	return mask
}

// closeAnswers closes the n answers still to come on answers, then calls
// done.
func closeAnswers(answers <-chan probeAnswer, n int, done func()) {
	for range n {
		if a := <-answers; a.resp != nil {
			a.resp.Body.Close()
		}
	}
	done()
}

// markStale records that entry i of cs answered the page stale.
func (cs *candidateSet) markStale(i int) {
	if cs.staleAt != nil { // nil: not a set a request probes with
		cs.staleAt.Or(1 << uint(i))
	}
}
