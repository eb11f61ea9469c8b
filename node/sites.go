package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/edgecache/edge/config"
	"github.com/edgecache/edge/internal/clientaddr"
	"github.com/edgecache/edge/origin"
	"github.com/edgecache/edge/proxy"
)

// Sites: the Host of a request picks a site (exact name, then a one-label
// wildcard, then the site marked default; the one-site shortcut answers
// every host), and the site's origin pool answers its misses. The table is
// swapped whole by a reload; requests in flight keep the table they
// started with.

// site is one configured site at run time.
type site struct {
	name     string
	shortcut bool // the origin.url shortcut: keys carry no site name
	pool     *origin.Pool
	requests prometheus.Counter
	resolved *proxy.Site        // what requests of this site carry in their context
	limiter  *rateLimiter       // per-client request rate (nil: none)
	limited  prometheus.Counter // requests refused by limiter
	rate     config.RateLimit   // limiter's settings, for the status page
}

// siteTable maps hosts to sites.
type siteTable struct {
	exact map[string]*site
	wild  map[string]*site // "shop.test" for *.shop.test
	any   *site            // the shortcut: every host
	def   *site            // default: true
	sites []*site
}

// lookup returns the site of a Host field, or nil: by its canonical form
// (proxy.CanonicalHost), the one the cache key and purge use. What is not
// a host has no site.
func (t *siteTable) lookup(host string) *site {
	host, ok := proxy.CanonicalHost(host)
	if !ok {
		return nil
	}
	return t.lookupCanonical(host)
}

// lookupCanonical is lookup for a host already in canonical form (the
// fronts canonicalise it once, for every later step).
func (t *siteTable) lookupCanonical(host string) *site {
	return pickHost(host, t.exact, t.wild, t.any, t.any != nil, t.def)
}

// pickHost finds a canonical host's value: its exact entry, else the
// wildcard of its parent, else the shortcut's (hasAny), else def.
func pickHost[T any](host string, exact, wild map[string]T, anyValue T, hasAny bool, def T) T {
	if strings.HasPrefix(host, "[") {
		host = host[1 : len(host)-1] // sites name IPv6 literals without brackets
	}
	if v, ok := exact[host]; ok {
		return v
	}
	if _, parent, ok := strings.Cut(host, "."); ok {
		if v, ok := wild[parent]; ok {
			return v
		}
	}
	if hasAny {
		return anyValue
	}
	return def
}

// names is nameOf frozen to t's mapping of hosts to key names alone: what
// a reload's purge record keeps for as long as fills begun before it may
// end (up to the purge log's length), where the table itself holds pools,
// clients, limiters and rules (a review's
// TestS58ReloadedSiteTableIsNotPinnedByThePurgeLog).
func (t *siteTable) names() func(host string) string {
	nameOf := func(s *site) string {
		if s == nil || s.shortcut {
			return ""
		}
		return s.name
	}
	exact, wild := make(map[string]string, len(t.exact)), make(map[string]string, len(t.wild))
	for h, s := range t.exact {
		exact[h] = nameOf(s)
	}
	for h, s := range t.wild {
		wild[h] = nameOf(s)
	}
	anyName, hasAny, def := nameOf(t.any), t.any != nil, nameOf(t.def)
	return func(host string) string { // t itself is not held
		c, ok := proxy.CanonicalHost(host)
		if !ok {
			return ""
		}
		return pickHost(c, exact, wild, anyName, hasAny, def)
	}
}

// siteNames are the names the sites' requests carry (proxy.Site.Name),
// among which limits.site_reserve splits its share of the upstream slots.
func (t *siteTable) siteNames() []string {
	names := make([]string, len(t.sites))
	for i, s := range t.sites {
		names[i] = s.resolved.Name
	}
	return names
}

// siteMetrics are the per-site collectors, shared by every table.
type siteMetrics struct {
	requests   *prometheus.CounterVec
	misdirects prometheus.Counter
	badHosts   prometheus.Counter
	limited    *prometheus.CounterVec // edge_rate_limited_total
	pools      *origin.PoolMetrics
	originErrs *prometheus.CounterVec // edge_origin_errors_total
}

func newSiteMetrics(reg prometheus.Registerer) *siteMetrics {
	m := &siteMetrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "edge_site_requests_total", Help: "Client requests by site (configured names only).",
		}, []string{"site"}),
		misdirects: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "edge_misdirected_requests_total", Help: "Requests for a host no site serves (421).",
		}),
		badHosts: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "edge_bad_host_requests_total", Help: "Requests whose Host the edge refuses as not a host (400): a non-numeric port, brackets around a name, an empty label. A Host net/http cannot read (none, two, a byte a Host field cannot hold) gets net/http's own 400 before the edge sees the request and is not counted here.",
		}),
		pools: origin.NewPoolMetrics(reg),
	}
	m.limited = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "edge_rate_limited_total", Help: "Requests refused (429) by a site's per-client rate limit (limits.rate, a site's rate_limit).",
	}, []string{"site"})
	reg.MustRegister(m.requests, m.misdirects, m.badHosts, m.limited)
	return m
}

// newSiteTable builds the sites and their pools (not started).
func newSiteTable(cfg *config.Config, m *siteMetrics, log *slog.Logger) (*siteTable, error) {
	t := &siteTable{exact: map[string]*site{}, wild: map[string]*site{}}
	for i, sc := range cfg.Sites {
		pc := origin.PoolConfig{Site: sc.Name, Balance: sc.Balance, Metrics: m.pools, Log: log,
			Health: origin.HealthCheck{Path: sc.Health.Path, Interval: sc.Health.Interval, Timeout: sc.Health.Timeout, ExpectStatus: sc.Health.ExpectStatus}}
		if sc.PreserveHost {
			pc.Health.Host = probeHost(sc.Hosts)
		}
		for _, u := range sc.Origins {
			oc := originConfig(cfg, log, m.originErrs)
			oc.URL, oc.PreserveHost = u, sc.PreserveHost
			pc.Origins = append(pc.Origins, oc)
		}
		pool, err := origin.NewPool(pc)
		if err != nil {
			t.stop()
			return nil, &config.Error{Key: fmt.Sprintf("sites[%d].origins", i), Reason: err.Error()}
		}
		s := &site{name: sc.Name, pool: pool, requests: m.requests.WithLabelValues(sc.Name),
			limiter: newRateLimiter(sc.RateLimit, cfg.Forwarding.TrustedProxies), limited: m.limited.WithLabelValues(sc.Name), rate: sc.RateLimit}
		t.sites = append(t.sites, s)
		for _, h := range sc.Hosts {
			switch {
			case h == "*":
				t.any, s.shortcut = s, true
			case strings.HasPrefix(h, "*."):
				t.wild[h[2:]] = s
			default:
				t.exact[h] = s
			}
		}
		if sc.Default {
			t.def = s
		}
		s.resolved = proxy.NewSite(s.name, s.shortcut, s)
		s.resolved.Rules = sc.Rules
	}
	return t, nil
}

func (t *siteTable) start() {
	for _, s := range t.sites {
		s.pool.Start()
	}
}

func (t *siteTable) stop() {
	for _, s := range t.sites {
		s.pool.Stop()
	}
}

// siteName is proxy.Config.SiteOf: the name that goes into cache keys.
func (n *Node) siteName(host string) string { return n.sites.Load().nameOf(host) }

// siteTableNames is proxy.Config.SiteTable: siteName of the table in
// force now, kept for as long as the caller holds it.
func (n *Node) siteTableNames() func(host string) string { return n.sites.Load().names() }

// nameOf is the name of the site of host in t ("" for none or the
// one-site shortcut).
func (t *siteTable) nameOf(host string) string {
	s := t.lookup(host)
	if s == nil || s.shortcut {
		return ""
	}
	return s.name
}

// siteFor is proxy.Config.SiteFor: the site that serves host, as the
// front resolves it for a request.
func (n *Node) siteFor(host string) *proxy.Site {
	if s := n.sites.Load().lookup(host); s != nil {
		return s.resolved
	}
	return nil
}

// siteFront answers requests for hosts no site serves with 421 (RFC 9110
// §15.5.20: this server is not configured to answer for that authority)
// and counts the others per site.
func (n *Node) siteFront(next *proxy.Handler) http.Handler {
	// own answers r itself, logged under site.
	own := func(w http.ResponseWriter, r *http.Request, site, detail string, answer http.HandlerFunc) {
		h := ownAnswer(n.cfg.NodeID, detail, answer)
		if n.access != nil {
			n.access.logged(site, r, w, unproxied(h))
			return
		}
		h(w, r)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host, ok := proxy.CanonicalHost(r.Host)
		if !ok {
			// Not a host (a non-numeric port, brackets around a name…):
			// no spelling of a host may reach a site under a key that a
			// purge of the plain spelling would miss.
			n.siteM.badHosts.Inc()
			own(w, r, "-", "bad-host", badHost)
			return
		}
		r.Host = host // the one spelling every later step sees
		if n.tls != nil && n.tls.misdirected(r, host) && !clientaddr.In(r.RemoteAddr, n.cfg.Forwarding.TrustedProxies) {
			n.siteM.misdirects.Inc()
			own(w, r, "-", "not-in-certificate", misdirected)
			return
		}
		s := n.sites.Load().lookupCanonical(host)
		if s == nil {
			n.siteM.misdirects.Inc()
			own(w, r, "-", "no-site", misdirected)
			return
		}
		s.requests.Inc()
		if s.limiter != nil && !s.limiter.allow(s.limiter.clientOf(r.RemoteAddr, r.Header), time.Now()) {
			s.limited.Inc()
			own(w, r, s.name, "rate-limited", s.limiter.tooMany)
			return
		}
		// Resolved once: the key, the origin fetch and the cluster are
		// handed the site from here on (proxy.Inbound, FetchRequest).
		in := proxy.Inbound{Site: s.resolved}
		if n.access != nil {
			n.access.logged(s.name, r, w, func(w http.ResponseWriter, r *http.Request, info *proxy.UpstreamInfo) {
				in.Upstream = info
				next.ServeInbound(w, r, in)
			})
			return
		}
		next.ServeInbound(w, r, in)
	})
}

// unproxied is an answer the front makes itself, for accessLog.logged:
// nothing went upstream.
func unproxied(f http.HandlerFunc) func(http.ResponseWriter, *http.Request, *proxy.UpstreamInfo) {
	return func(w http.ResponseWriter, r *http.Request, _ *proxy.UpstreamInfo) { f(w, r) }
}

// ownAnswer marks an answer the node makes itself, before any cache is
// consulted, with its Cache-Status (RFC 9211: this cache, and why, in
// detail) and Via, as the proxy marks its own refusals: a client or an
// operator can tell which node answered and why.
func ownAnswer(node, detail string, f http.HandlerFunc) http.HandlerFunc {
	status, via := []string{node + "; detail=" + detail}, []string{"1.1 " + node}
	return func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h["Cache-Status"], h["Via"] = status, via
		f(w, r)
	}
}

func badHost(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	http.Error(w, "400 the Host field is not a valid host", http.StatusBadRequest)
}

func misdirected(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	http.Error(w, "421 no site is configured for this host", http.StatusMisdirectedRequest)
}

// errNoSite is a miss for a host no site serves (a peer's request after a
// reload that dropped the site).
var errNoSite = errors.New("node: no site is configured for this host")

// originFetcher sends a miss to its site's origin pool: the site the
// front resolved (a reload since then keeps the request on the pool it
// started with), or, for a request that came without one, its Host's.
type originFetcher struct{ n *Node }

func (o originFetcher) Fetch(ctx context.Context, fr proxy.FetchRequest) (proxy.Result, error) {
	var pool *origin.Pool
	if fr.Site != nil {
		if s, ok := fr.Site.Node.(*site); ok {
			pool = s.pool
		}
	}
	if pool == nil {
		s := o.n.sites.Load().lookup(fr.Req.Host)
		if s == nil {
			return proxy.Result{}, errNoSite
		}
		pool = s.pool
	}
	var a origin.Attempt
	resp, err := pool.FetchReporting(ctx, fr.Req, &a)
	return proxy.Result{Resp: resp, Keep: true, From: proxy.UpstreamOrigin, Addr: a.Origin, Retries: a.Retries}, err
}

// servePeer is the front of the peer listener's data requests: a peer's
// request carries a canonical host (its ingress's front made it so), and
// its site is resolved once here as on the client listeners. A host no
// site serves any more (a reload in between) goes on without one: its
// fetch fails with errNoSite.
func (n *Node) servePeer(w http.ResponseWriter, r *http.Request, in proxy.Inbound) {
	if s := n.sites.Load().lookup(r.Host); s != nil {
		in.Site = s.resolved
	}
	n.proxy.ServeInbound(w, r, in)
}

// SiteStatus is one site on the status page.
type SiteStatus struct {
	Name    string               `json:"name"`
	Origins []origin.OriginState `json:"origins"`
	// RateLimit is the per-client limit ("" when off) and RateLimited
	// the requests it refused.
	RateLimit   string       `json:"rate_limit,omitempty"`
	RateLimited uint64       `json:"rate_limited"`
	Rules       []RuleStatus `json:"rules,omitempty"`
	// Requests since the site was (re)configured, their rate over the
	// last minute, and the share the cache answered.
	Requests     uint64  `json:"requests"`
	RequestsRate float64 `json:"requests_per_second"`
	HitRatio     float64 `json:"hit_ratio"`
	// Upstream is the limits.max_inflight slots the site's requests hold
	// now, and UpstreamReserved the part kept for it (limits.site_reserve).
	Upstream         int `json:"upstream_in_flight"`
	UpstreamReserved int `json:"upstream_reserved"`
}

// RuleStatus is one cache rule on the status page: what it matches,
// what it does, and its requests by result.
type RuleStatus struct {
	Name     string            `json:"name"`
	Does     []string          `json:"does"`
	Requests map[string]uint64 `json:"requests"`
}

func (n *Node) siteStatus() []SiteStatus {
	t := n.sites.Load()
	rates := n.rates.rates()
	held, reserve := n.proxy.UpstreamBySite()
	out := make([]SiteStatus, 0, len(t.sites))
	for _, s := range t.sites {
		st := SiteStatus{Name: s.name, Origins: s.pool.States(), RateLimited: uint64(counterOf(s.limited)),
			Upstream: held[s.resolved.Name], UpstreamReserved: reserve}
		var hits uint64
		st.Requests, hits = s.totals()
		if st.Requests > 0 {
			st.HitRatio = float64(hits) / float64(st.Requests)
		}
		st.RequestsRate = rates["site "+s.name]
		if s.rate.Rate > 0 {
			st.RateLimit = fmt.Sprintf("%g/s per %s, burst %d", s.rate.Rate, s.rate.Key, s.rate.Burst)
		}
		if s.resolved.Rules != nil {
			for _, r := range s.resolved.Rules.Rules {
				st.Rules = append(st.Rules, RuleStatus{Name: r.Name, Does: r.Explain(), Requests: n.proxy.RuleRequests(s.name, r.Name)})
			}
		}
		out = append(out, st)
	}
	return out
}

// peerHitServer is the node's side of the cluster listener's hit path
// (cluster.PeerHits): the site table and the proxy's hit decision.
type peerHitServer struct{ n *Node }

func (s peerHitServer) Site(host string) (*proxy.Site, bool) {
	if st := s.n.sites.Load().lookupCanonical(host); st != nil {
		return st.resolved, true
	}
	return nil, false
}

func (s peerHitServer) AppendHit(dst []byte, req *proxy.HitRequest, date []byte, a *proxy.HitAnswer) bool {
	return s.n.proxy.AppendHit(dst, req, date, a)
}

func (s peerHitServer) ReleaseHit(pinned *proxy.Entry, clientIP string) {
	s.n.proxy.ReleaseHit(pinned, clientIP)
}

// probeHost is the Host a preserve_host site's health checks send: its
// first host that is no wildcard ("" if every one is: the origin URL's).
func probeHost(hosts []string) string {
	for _, h := range hosts {
		if !strings.Contains(h, "*") {
			return h
		}
	}
	return ""
}
