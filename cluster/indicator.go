package cluster

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/edgecache/edge/indicators"
)

// inserted feeds the local indicator with a key the store just took in and
// advertises when U insertions have accumulated.
//
// The advertisement runs on the storing goroutine (a client's miss), and
// only when none is under way: with one running, concurrent stores past
// U each started a full rebuild of their own, and since advertisements
// run one at a time they queued behind each other on clients' requests (a
// review: 8 stores, 7 rebuilds, 441 ms). A store the running one missed
// leaves the store dirty, for the next U or advertise_max.
func (c *Cluster) inserted(key string) {
	full := c.filter.Insert([]byte(key))
	c.dirty.Store(true)
	c.mu.Lock()
	due := full || (c.cfg.AdvertiseMax > 0 && time.Since(c.lastAdv) > c.cfg.AdvertiseMax)
	c.mu.Unlock()
	if due && c.advMu.TryLock() {
		c.advertiseLocked()
		c.advMu.Unlock()
	}
}

// removed notes a key that left the store (evicted, purged, replaced):
// the advertised filter may hold it, so the store counts as changed and
// advertiseIfDue advertises it within advertise_max, stores or no stores
// (before, a purge with nothing stored after it left peers a positive
// for every purged page, each a probe that missed). Called under the
// store's lock: it only sets a flag.
func (c *Cluster) removed(string) { c.dirty.Store(true) }

// advertiseIfDue advertises, on a goroutine of its own, when the store
// has changed since the last advertisement and indicators.advertise_max
// has passed: the bound holds when the stores stop, not only at the next
// one (before, a node that stopped storing never advertised what it had
// stored since its last advertisement, and its peers kept a stale copy,
// and its fnr, for good). The monitor calls it every round.
func (c *Cluster) advertiseIfDue(now time.Time) {
	c.mu.Lock()
	due := c.dirty.Load() && c.cfg.AdvertiseMax > 0 && now.Sub(c.lastAdv) > c.cfg.AdvertiseMax
	c.mu.Unlock()
	if due && c.advertising.CompareAndSwap(false, true) {
		go func() {
			defer c.advertising.Store(false)
			c.advertise()
		}()
	}
}

// advertise rebuilds the filter from the store's keys and publishes the new
// epoch; peers pull it when they see the epoch in our heartbeats. Calls
// run one at a time, so that epochs are published in order; the store
// counts as advertised from before its keys are read, so that a key
// stored meanwhile leaves it dirty for the next advertisement.
func (c *Cluster) advertise() {
	c.advMu.Lock()
	defer c.advMu.Unlock()
	c.advertiseLocked()
}

// advertiseLocked is advertise with c.advMu held.
func (c *Cluster) advertiseLocked() {
	c.dirty.Store(false)
	keys := c.store.Keys(func(string) bool { return true })
	snap := c.filter.Advertise(func(yield func([]byte) bool) {
		for _, k := range keys {
			if !yield([]byte(k)) {
				return
			}
		}
	})
	full := indicators.EncodeFull(snap)
	var delta []byte
	if d, isDelta := indicators.Encode(snap); isDelta {
		delta = d
	}
	c.mu.Lock()
	c.advFull, c.advDelta, c.advEpoch = full, delta, snap.Epoch
	c.lastAdv = time.Now()
	c.mu.Unlock()
	c.metaEpoch.Store(snap.Epoch) // announced in membership metadata (publishMeta)
	c.metrics.Advertisements.Inc()
	c.metrics.IndicatorEpoch.Set(float64(snap.Epoch))
}

// serveIndicator answers GET /_edge/indicator?have=E: a delta when the
// caller holds the previous epoch and one exists, else the full filter.
func (c *Cluster) serveIndicator(w http.ResponseWriter, r *http.Request) {
	have, _ := strconv.ParseUint(r.URL.Query().Get("have"), 10, 64)
	c.mu.Lock()
	body, kind := c.advFull, "full"
	if c.advDelta != nil && have+1 == c.advEpoch {
		body, kind = c.advDelta, "delta"
	}
	c.mu.Unlock()
	if body == nil {
		http.Error(w, "nothing advertised yet", http.StatusNotFound)
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Edge-Indicator", kind)
	c.metrics.AdvertisementBytes.WithLabelValues(kind).Add(float64(len(body)))
	_, _ = w.Write(body)
}

// pullIndicator fetches a peer's advertisement up to epoch.
func (c *Cluster) pullIndicator(p *Peer, epoch uint64) {
	c.mu.Lock()
	have := p.replica.Epoch()
	replica, addr := p.replica, p.Addr // Addr changes under c.mu (memberUp)
	if p.epochSeen >= epoch {
		c.mu.Unlock()
		return
	}
	p.epochSeen = epoch // one pull at a time per epoch
	c.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 4*c.cfg.PeerTimeout)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, c.scheme+"://"+addr+"/_edge/indicator?have="+strconv.FormatUint(have, 10), nil)
	resp, err := c.do(req, p.ID)
	if err != nil {
		c.retryPull(p)
		return
	}
	defer resp.Body.Close()
	// Read one byte past the limit: a longer body is refused, and a body
	// within it was read to its end, where its MAC trailer is checked.
	limit := int64(indicators.MaxBits/8 + 1024)
	body, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if err == nil && int64(len(body)) > limit {
		err = errors.New("cluster: indicator advertisement larger than any filter")
	}
	if err != nil || resp.StatusCode != http.StatusOK {
		c.retryPull(p)
		return
	}
	if err := replica.Apply(body); err != nil {
		reason, _ := indicators.RejectReason(err)
		c.metrics.IndicatorRejected.WithLabelValues(string(reason)).Inc()
		c.retryPull(p)
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.peers[p.ID] != p {
		return // forgotten while the pull was under way (forget.go): no series again
	}
	c.metrics.IndicatorPulls.WithLabelValues(p.ID).Inc()
	p.pulledAt = time.Now()
}

// retryPull lets the next heartbeat trigger another pull.
func (c *Cluster) retryPull(p *Peer) {
	c.mu.Lock()
	p.epochSeen = p.replica.Epoch()
	c.mu.Unlock()
}
