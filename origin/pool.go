package origin

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// A Pool spreads one site's requests over its origin servers and keeps
// them out of rotation while they fail:
//   - balance: least outstanding requests, or rendezvous hashing of the
//     URL ("hash": each origin sees a stable share of the URLs, which keeps
//     the origins' own caches warm);
//   - passive ejection: EjectAfter consecutive failures (a connection that
//     could not be made or broke before a response, or a 5xx) take an
//     origin out for a backoff that doubles on each ejection, up to
//     MaxBackoff, and halves back as it succeeds;
//   - active checks (Health.Path set): a GET every Interval; a failure
//     ejects, a success after an ejection brings the origin back at once;
//   - a failed idempotent request is retried once on another origin.
// When every origin is out the pool still tries them (least recently
// ejected first): better a request that may succeed than none, and the
// proxy serves stale-if-error when it fails.

// HealthCheck configures active checks of a pool's origins.
type HealthCheck struct {
	Path         string // "" turns active checks off
	Interval     time.Duration
	Timeout      time.Duration
	ExpectStatus int // 0: any 2xx or 3xx
	// Host is the Host field probes send ("": the origin URL's host). A
	// site that preserves its clients' Host gives one of its own hosts: its
	// origins may serve only those (name-based virtual hosting), and a
	// probe with the origin URL's host was refused, so every member was
	// marked down while every client request succeeded (a review's
	// TestS30OriginHealthCheckOfAPreserveHostSiteSendsTheOriginsHost).
	Host string
}

// PoolConfig configures a pool.
type PoolConfig struct {
	Site       string
	Origins    []ClientConfig // one per origin server (URL set in each)
	Balance    string         // "least" (default) or "hash"
	Health     HealthCheck
	EjectAfter int           // consecutive failures before an ejection
	BaseEject  time.Duration // first ejection's length
	MaxEject   time.Duration // longest ejection (ejections double up to it)
	Metrics    *PoolMetrics
	Log        *slog.Logger
}

// PoolMetrics are the collectors every pool of a node shares.
type PoolMetrics struct {
	Up          *prometheus.GaugeVec   // 1 when an origin is in rotation
	Ejections   *prometheus.CounterVec // times an origin was taken out
	Outstanding *prometheus.GaugeVec   // requests in flight per origin
	Retries     *prometheus.CounterVec // requests retried on another origin
}

// NewPoolMetrics registers the pool collectors; labels are site and
// origin, bounded by the configuration.
func NewPoolMetrics(reg prometheus.Registerer) *PoolMetrics {
	m := &PoolMetrics{
		Up: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "edge_origin_up", Help: "1 when an origin server is in rotation, 0 while it is ejected."}, []string{"site", "origin"}),
		Ejections: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "edge_origin_ejections_total", Help: "Times an origin server was taken out of rotation, by cause (passive, active)."},
			[]string{"site", "origin", "cause"}),
		Outstanding: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "edge_origin_outstanding_requests", Help: "Requests in flight to each origin server."}, []string{"site", "origin"}),
		Retries:     prometheus.NewCounterVec(prometheus.CounterOpts{Name: "edge_origin_retries_total", Help: "Idempotent requests retried on another origin server of the pool."}, []string{"site"}),
	}
	reg.MustRegister(m.Up, m.Ejections, m.Outstanding, m.Retries)
	return m
}

// Pool is a site's origin servers.
type Pool struct {
	cfg     PoolConfig
	members []*member
	seed    maphash.Seed
	next    atomic.Uint64 // round-robin among equally loaded origins
	log     *slog.Logger
	stop    chan struct{}
	stopped sync.Once
	// retries is edge_origin_retries_total's series of the site, resolved
	// once: a request still on a pool a reload removed counts into it
	// after the reload deleted it, never bringing it back (by label, it
	// did: a review's TestS57RequestInFlightOnARemovedSiteBringsBackItsSeries).
	retries prometheus.Counter
}

type member struct {
	c           *Client
	url         string
	outstanding atomic.Int64
	mu          sync.Mutex
	fails       int           // consecutive failures
	out         time.Time     // ejected until
	backoff     time.Duration // the next ejection's length
	downSince   time.Time     // first ejection since it was last in rotation (zero: in rotation)
	warnedAt    time.Time     // when its ejection was last logged as a warning
	up          prometheus.Gauge
	inflight    prometheus.Gauge
	ejections   map[string]prometheus.Counter // by cause, resolved once (as Pool.retries)
}

// stillDownRepeat is how often a member that stays down is logged again
// as a warning: enough to be seen, never a line per health check.
const stillDownRepeat = 10 * time.Minute

// DefaultPoolConfig returns a pool's defaults, each with its reason.
func DefaultPoolConfig() PoolConfig {
	return PoolConfig{
		Balance:    "least",          // the least loaded origin: a slow one gets less
		EjectAfter: 3,                // one failure is noise; three in a row is a pattern
		BaseEject:  time.Second,      // a restart-length outage costs one short ejection
		MaxEject:   30 * time.Second, // a dead origin is tried again at least this often
	}
}

// NewPool builds a pool; call Start to run its health checks. Its zero
// fields take DefaultPoolConfig's values.
func NewPool(cfg PoolConfig) (*Pool, error) {
	if len(cfg.Origins) == 0 {
		return nil, errors.New("origin pool: no origins")
	}
	d := DefaultPoolConfig()
	if cfg.Balance == "" {
		cfg.Balance = d.Balance
	}
	if cfg.EjectAfter <= 0 {
		cfg.EjectAfter = d.EjectAfter
	}
	if cfg.BaseEject <= 0 {
		cfg.BaseEject = d.BaseEject
	}
	if cfg.MaxEject <= 0 {
		cfg.MaxEject = d.MaxEject
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	p := &Pool{cfg: cfg, seed: maphash.MakeSeed(), log: cfg.Log, stop: make(chan struct{})}
	for _, oc := range cfg.Origins {
		c, err := NewClient(oc)
		if err != nil {
			return nil, err
		}
		m := &member{c: c, url: c.URL(), backoff: cfg.BaseEject}
		if cfg.Metrics != nil {
			m.up = cfg.Metrics.Up.WithLabelValues(cfg.Site, m.url)
			m.inflight = cfg.Metrics.Outstanding.WithLabelValues(cfg.Site, m.url)
			m.up.Set(1)
			m.ejections = map[string]prometheus.Counter{}
			for _, cause := range []string{"passive", "active"} {
				m.ejections[cause] = cfg.Metrics.Ejections.WithLabelValues(cfg.Site, m.url, cause)
			}
		}
		p.members = append(p.members, m)
	}
	if cfg.Metrics != nil {
		p.retries = cfg.Metrics.Retries.WithLabelValues(cfg.Site)
	}
	return p, nil
}

// CarryState gives p's origins the health from's origins of the same
// site and URL have: a reload that rebuilds the pool (of the same site
// or an unrelated change) keeps an ejected origin out for the rest of its
// ejection, and its failure count and backoff, instead of sending it
// requests at once (a review: 3 of the next 10 requests failed over).
// Call it before p is started.
func (p *Pool) CarryState(from *Pool) {
	if from == nil || from.cfg.Site != p.cfg.Site {
		return
	}
	for _, m := range p.members {
		for _, o := range from.members {
			if o.url != m.url {
				continue
			}
			o.mu.Lock()
			fails, out, backoff, downSince, warnedAt := o.fails, o.out, o.backoff, o.downSince, o.warnedAt
			o.mu.Unlock()
			m.mu.Lock()
			m.fails, m.out, m.backoff, m.downSince, m.warnedAt = fails, out, backoff, downSince, warnedAt
			m.mu.Unlock()
			if m.up != nil && !out.IsZero() {
				m.up.Set(0)
			}
		}
	}
}

// OriginState is one origin server's state for the status page.
type OriginState struct {
	URL         string    `json:"url"`
	Up          bool      `json:"up"`
	EjectedTill time.Time `json:"ejected_until,omitzero"`
	Outstanding int64     `json:"outstanding"`
	Failures    int       `json:"consecutive_failures"`
}

// States reports every origin's state.
func (p *Pool) States() []OriginState {
	now := time.Now()
	out := make([]OriginState, 0, len(p.members))
	for _, m := range p.members {
		m.mu.Lock()
		st := OriginState{URL: m.url, Up: !now.Before(m.out), Outstanding: m.outstanding.Load(), Failures: m.fails}
		if !st.Up {
			st.EjectedTill = m.out
		}
		m.mu.Unlock()
		out = append(out, st)
	}
	return out
}

// order returns the members to try for a request: in rotation first, by
// the balance policy, then ejected ones by how soon they come back.
func (p *Pool) order(req *http.Request) []*member {
	now := time.Now()
	var in, out []*member
	for _, m := range p.members {
		m.mu.Lock()
		ok := !now.Before(m.out)
		m.mu.Unlock()
		if ok {
			in = append(in, m)
		} else {
			out = append(out, m)
		}
	}
	if p.cfg.Balance == "hash" {
		key := req.Host + req.URL.RequestURI()
		score := func(m *member) uint64 {
			var h maphash.Hash
			h.SetSeed(p.seed)
			h.WriteString(m.url)
			h.WriteString(key)
			return h.Sum64()
		}
		slices.SortFunc(in, func(a, b *member) int { return cmpDesc(score(a), score(b)) })
	} else if len(in) > 1 {
		// Round-robin among equals: rotate, then a stable sort by load.
		r := int(p.next.Add(1) % uint64(len(in)))
		in = append(in[r:], in[:r]...)
		slices.SortStableFunc(in, func(a, b *member) int { return int(a.outstanding.Load() - b.outstanding.Load()) })
	}
	slices.SortFunc(out, func(a, b *member) int { return a.ejectedUntil().Compare(b.ejectedUntil()) })
	return append(in, out...)
}

func cmpDesc(a, b uint64) int {
	switch {
	case a > b:
		return -1
	case a < b:
		return 1
	}
	return 0
}

func (m *member) ejectedUntil() time.Time {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.out
}

// Fetch sends req to the pool: one origin, and for an idempotent request
// that failed (no response, or a 502/503/504), once more on another.
func (p *Pool) Fetch(ctx context.Context, req *http.Request) (*http.Response, error) {
	return p.FetchReporting(ctx, req, nil)
}

// Attempt is what a fetch tells its caller for the access log: the origin
// that gave the answer (its URL) and how many members were tried before it.
type Attempt struct {
	Origin  string
	Retries int
}

// FetchReporting is Fetch that fills a (if not nil) with the origin that
// answered and the retries it took.
func (p *Pool) FetchReporting(ctx context.Context, req *http.Request, a *Attempt) (*http.Response, error) {
	order := p.order(req)
	if a != nil {
		a.Origin = order[0].url
	}
	resp, err := p.fetchFrom(ctx, order[0], req)
	if len(order) < 2 || !idempotent(req) || !failed(resp, err) || ctx.Err() != nil {
		return resp, err
	}
	if a != nil {
		a.Origin, a.Retries = order[1].url, a.Retries+1
	}
	if resp != nil {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		resp.Body.Close()
	}
	if p.retries != nil {
		p.retries.Inc()
	}
	return p.fetchFrom(ctx, order[1], req)
}

func (p *Pool) fetchFrom(ctx context.Context, m *member, req *http.Request) (*http.Response, error) {
	m.outstanding.Add(1)
	if m.inflight != nil {
		m.inflight.Inc()
	}
	resp, err := m.c.Fetch(ctx, req)
	m.outstanding.Add(-1)
	if m.inflight != nil {
		m.inflight.Dec()
	}
	if failed(resp, err) {
		if ctx.Err() == nil { // a client that left says nothing about the origin
			p.failure(m, "passive")
		}
	} else {
		p.success(m)
	}
	return resp, err
}

func idempotent(r *http.Request) bool {
	switch r.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		return r.Body == nil || r.Body == http.NoBody
	}
	return false
}

// failed: no response, or one that says the origin (or what is behind it)
// is in trouble. Other 5xx are the application's answers, passed on.
func failed(resp *http.Response, err error) bool {
	if err != nil {
		return true
	}
	switch resp.StatusCode {
	case http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return true
	}
	return false
}

func (p *Pool) failure(m *member, cause string) {
	m.mu.Lock()
	m.fails++
	// A failed probe ejects (or keeps out) the member until a good one:
	// out for its backoff alone, a dead member took requests between the
	// backoff's end and its next probe, and an order sent to it failed (a
	// review's TestS30OriginMemberFailingItsHealthCheckGetsTrafficBeforeItsNextProbe).
	// Passive failures eject once per ejection, as before.
	active := cause == "active"
	eject := active || m.fails >= p.cfg.EjectAfter && !time.Now().Before(m.out)
	var d time.Duration
	var first, remind, wasIn bool
	var since time.Time
	if eject {
		now := time.Now()
		wasIn = !now.Before(m.out) // a probe that keeps it out takes nothing out
		d = m.backoff
		if h := p.cfg.Health; active && h.Interval+h.Timeout > d {
			d = h.Interval + h.Timeout // past the next probe's answer
		}
		m.out = now.Add(d)
		m.backoff = min(2*m.backoff, p.cfg.MaxEject)
		m.fails = 0
		// The first ejection is a warning; while the member stays down,
		// each re-ejection (every health check of a dead member) is
		// debug, with a reminder at most every stillDownRepeat.
		first = m.downSince.IsZero()
		if first {
			m.downSince = now
		}
		remind = !first && now.Sub(m.warnedAt) >= stillDownRepeat
		if first || remind {
			m.warnedAt = now
		}
		since = m.downSince
	}
	m.mu.Unlock()
	if eject {
		switch {
		case first:
			p.log.Warn("origin ejected", "site", p.cfg.Site, "origin", m.url, "for", d, "cause", cause)
		case remind:
			p.log.Warn("origin still down", "site", p.cfg.Site, "origin", m.url, "since", since.Format(time.RFC3339), "cause", cause)
		default:
			p.log.Debug("origin ejected again", "site", p.cfg.Site, "origin", m.url, "for", d, "cause", cause)
		}
		if m.up != nil {
			m.up.Set(0)
			if c := m.ejections[cause]; wasIn && c != nil {
				c.Inc()
			}
		}
	}
}

func (p *Pool) success(m *member) {
	m.mu.Lock()
	m.fails = 0
	back := !m.out.IsZero()
	m.out = time.Time{}
	m.downSince = time.Time{}
	if m.backoff > p.cfg.BaseEject {
		m.backoff /= 2
	}
	m.mu.Unlock()
	if back {
		p.log.Info("origin back in rotation", "site", p.cfg.Site, "origin", m.url)
	}
	if m.up != nil {
		m.up.Set(1)
	}
}

// Start runs the active checks until Stop (no-op without Health.Path).
func (p *Pool) Start() {
	if p.cfg.Health.Path == "" {
		return
	}
	for _, m := range p.members {
		go p.check(m)
	}
}

// Stop ends the checks and closes idle connections.
// Origins returns the pool's site and its origins' URLs, as its metrics
// name them.
func (p *Pool) Origins() (site string, urls []string) {
	for _, m := range p.members {
		urls = append(urls, m.url)
	}
	return p.cfg.Site, urls
}

// Forget removes the metric series of the pool's origins that keep does
// not keep (a reload removed them): an origin no longer configured must
// not stay on the dashboard as in rotation, or ejected, for good (a
// review's test). Series a newer pool shares are left to it.
func (p *Pool) Forget(keep func(site, url string) bool) {
	mt := p.cfg.Metrics
	if mt == nil {
		return
	}
	for _, m := range p.members {
		if keep(p.cfg.Site, m.url) {
			continue
		}
		mt.Up.DeleteLabelValues(p.cfg.Site, m.url)
		mt.Outstanding.DeleteLabelValues(p.cfg.Site, m.url)
		mt.Ejections.DeleteLabelValues(p.cfg.Site, m.url, "passive")
		mt.Ejections.DeleteLabelValues(p.cfg.Site, m.url, "active")
	}
}

func (p *Pool) Stop() {
	p.stopped.Do(func() { close(p.stop) })
	for _, m := range p.members {
		m.c.CloseIdle()
	}
}

func (p *Pool) check(m *member) {
	h := p.cfg.Health
	t := time.NewTicker(h.Interval)
	defer t.Stop()
	for {
		select {
		case <-p.stop:
			return
		case <-t.C:
		}
		if err := p.probe(m); err != nil {
			p.log.Debug("health check failed", "site", p.cfg.Site, "origin", m.url, "err", err)
			p.failure(m, "active")
		} else {
			p.success(m)
		}
	}
}

// probe sends one health check.
func (p *Pool) probe(m *member) error {
	h := p.cfg.Health
	ctx, cancel := context.WithTimeout(context.Background(), h.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, h.Path, nil)
	if err != nil {
		return err
	}
	req.Host = h.Host
	resp, err := m.c.Fetch(ctx, req)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	if h.ExpectStatus != 0 && resp.StatusCode != h.ExpectStatus || h.ExpectStatus == 0 && resp.StatusCode >= 400 {
		return fmt.Errorf("status %d", resp.StatusCode)
	}
	return nil
}
