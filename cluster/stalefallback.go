package cluster

import (
	"context"
	"math/bits"
	"time"

	"github.com/edgecache/edge/proxy"
)

// A probe's stale answer is no win (recordAnswer): a probe never refreshes
// what it reads, so a stale copy served from it would stay stale where it
// is, and the request climbs instead. When that climb fails (the origin is
// down, every hop refused), the stale copies the probes saw are still what
// the site allowed to be served (stale-while-revalidate), and serving one
// beats a 502 (a review's test,
// TestS47StaleProbeAnswerTurnsIntoAnErrorWhenTheOriginIsDown). The probe
// answers themselves were closed long before (holding a peer's answer
// open for the length of a climb would hold its connection too), so the
// peers that answered stale are asked again, only-if-cached, and the first
// answer from a store, stale or not, is served.

// staleFallback asks cs's peers that answered stale again, and returns the
// first that answers the page from its store; ok is false when none was
// stale or none answers it now. It serves nothing a purge may have named
// since the request's fetch began (mark; a review's
// TestS48StaleFallbackServesAPagePurgedWhileTheClimbWasOut: the purge
// reached the home, not X, and X's copy was served after the purge had
// returned), and asks no peer that is suspected or owes purges now.
func (c *Cluster) staleFallback(ctx context.Context, fr proxy.FetchRequest, kh uint64, isHome bool, cs *candidateSet, mark holdMark) (proxy.Result, bool) {
	mask := c.stillAskable(cs, cs.staleAt.Load())
	if mask == 0 {
		return proxy.Result{}, false
	}
	if !c.copies.keepable(mark, fr.Key, nil, 0, time.Now()) {
		c.metrics.StaleFallbacks.WithLabelValues("purged").Inc()
		return proxy.Result{}, false
	}
	pctx, cancel := context.WithCancel(ctx)
	answers := make(chan probeAnswer, bits.OnesCount64(mask))
	sent := c.sendProbesOn(pctx, answers, fr.Req, fr.Key, cs.peers, mask)
	outcome := "none"
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
			c.metrics.StaleFallbacks.WithLabelValues("purged").Inc()
			return proxy.Result{}, false
		}
		release := afterAll(2, cancel)
		a.resp.Body = &cancelOnClose{ReadCloser: a.resp.Body, cancel: release}
		go closeAnswers(answers, sent-got, release)
		if res, ok := c.settle(ctx, fr, a.resp, cs.ids[a.i]); ok {
			c.metrics.StaleFallbacks.WithLabelValues("served").Inc()
			c.races.staleServed.Add(1)
			return c.probeResult(kh, isHome, res), true
		}
		break // its body failed before a byte was sent
	}
	cancel()
	if ctx.Err() != nil {
		outcome = "cancelled" // the request ended first
	}
	c.metrics.StaleFallbacks.WithLabelValues(outcome).Inc()
	return proxy.Result{}, false
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
