package node

import (
	"sync"
	"time"
)

// The status page shows rates over the last minute beside the lifetime
// totals: a sampler keeps the totals every rateStep for rateSpan, and a
// rate is the difference between the newest sample and the oldest within
// the span, over the time between them.

const (
	rateStep = 5 * time.Second
	rateSpan = time.Minute
)

type rateSample struct {
	at     time.Time
	totals map[string]float64
}

// rateWindow holds the samples of the last rateSpan.
type rateWindow struct {
	mu      sync.Mutex
	samples []rateSample // oldest first
}

// add records totals taken at at, dropping samples older than the span.
func (w *rateWindow) add(at time.Time, totals map[string]float64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.samples = append(w.samples, rateSample{at, totals})
	for len(w.samples) > 2 && at.Sub(w.samples[1].at) >= rateSpan {
		w.samples = w.samples[1:]
	}
}

// rates returns every total's rate per second over the window (nil until
// two samples exist).
func (w *rateWindow) rates() map[string]float64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.samples) < 2 {
		return nil
	}
	first, last := w.samples[0], w.samples[len(w.samples)-1]
	dt := last.at.Sub(first.at).Seconds()
	if dt <= 0 {
		return nil
	}
	out := make(map[string]float64, len(last.totals))
	for k, v := range last.totals {
		if d := v - first.totals[k]; d > 0 {
			out[k] = d / dt
		} else {
			out[k] = 0
		}
	}
	return out
}

// rateTotals are the totals the status page shows rates of: requests by
// result ("result hit"), and per site its requests and hits ("site shop",
// "site-hit shop"). A reload carries a staying site's counts over
// (Site.CarryCounts); a new site starts at zero.
func (n *Node) rateTotals() map[string]float64 {
	out := map[string]float64{}
	for k, v := range n.proxy.Stats().Requests {
		out["result "+k] = float64(v)
	}
	for _, s := range n.sites.Load().sites {
		total, hits := s.totals()
		out["site "+s.name] = float64(total)
		out["site-hit "+s.name] = float64(hits)
	}
	return out
}

// totals are the site's requests and those answered from the cache. A
// request its rate limit refused is one of its requests, as
// edge_site_requests_total counts it (the 429 never reaches the proxy's
// per-result counts: a review read 3 requests on this page and 12 in
// /metrics after nine refusals).
func (s *site) totals() (total, hits uint64) {
	total = uint64(counterOf(s.limited))
	for result, v := range s.resolved.Results() {
		total += v
		if servedFromCache(result) {
			hits += v
		}
	}
	return total, hits
}

// sampleRates runs the sampler until done closes.
func (n *Node) sampleRates(done <-chan struct{}) {
	t := time.NewTicker(rateStep)
	defer t.Stop()
	n.rates.add(time.Now(), n.rateTotals())
	for {
		select {
		case <-done:
			return
		case now := <-t.C:
			n.rates.add(now, n.rateTotals())
		}
	}
}

// servedFromCache reports whether a result was answered by the cache
// (the status page's hit ratio).
func servedFromCache(result string) bool {
	switch result {
	case "hit", "stale", "collapsed", "revalidated", "stale_error":
		return true
	}
	return false
}
