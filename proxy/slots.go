package proxy

import (
	"net/http"
	"sync"

	"github.com/edgecache/edge/internal/clientaddr"
)

// Upstream slots. limits.max_inflight bounds the requests a node has
// upstream at once (misses, passes, uploads, slice fetches); hits never
// take one. With one pool for every site, one site whose origin hangs or
// crawls fills it (each of its misses holds a slot until
// origin.response_timeout) and every other site's misses are refused 503
// while their origins are fine: a tenant's outage becomes everyone's.
//
// limits.site_reserve keeps a part of the pool for each site: that share
// of the slots is split evenly among the configured sites (two or more),
// and a site's part is for its own requests only. A site may use the rest
// freely, first come first served, so a site alone busy still has nearly
// the whole pool (all but the other sites' unused parts), and a site whose
// origin hangs takes the rest but never another site's part. Varnish
// (backend max_connections) and Traffic Server
// (proxy.config.http.per_server.connection.max) cap each origin instead,
// which an operator must size per origin and which leaves slots idle
// when one site is busy; a reserve needs no sizing and wastes nothing.

// upstreamSlots counts slots in use against a limit and the sites' parts,
// all of which a reload may change (configure). One mutex: a slot is
// taken once per upstream request, which costs far more than the lock.
type upstreamSlots struct {
	mu      sync.Mutex
	limit   int // limits.max_inflight
	share   float64
	used    int                   // slots held, every site's
	reserve int                   // slots kept for each configured site (0: one pool)
	unused  int                   // reserved slots their sites do not hold: Σ max(0, reserve − used) over configured sites
	sites   map[string]*siteSlots // configured sites, and others while they hold slots
	names   []string              // the configured sites
}

// siteSlots is one site's use of the upstream slots.
type siteSlots struct {
	name       string
	used       int
	configured bool // one of the sites the reserve is split among
}

// upstreamSlot is one slot taken, for its release; the zero value holds
// none.
type upstreamSlot struct {
	slots *upstreamSlots
	site  *siteSlots
}

// Refusal reasons of acquire (edge_requests_rejected_total{reason}).
const (
	refusedOverload     = "overload"      // every slot is taken
	refusedSiteOverload = "overload_site" // the free slots are other sites' parts
	refusedClient       = "client_limit"  // the client is at limits.max_inflight_per_client
)

// setLimit sets limits.max_inflight. Requests under way keep their
// slots; a lower limit refuses new ones until enough have ended.
func (s *upstreamSlots) setLimit(limit int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.limit = limit
	s.split()
}

// setSites sets the reserved share and the sites it is split among.
// Requests under way keep their slots, counted against the sites they
// started with (a removed site's until they end).
func (s *upstreamSlots) setSites(share float64, names []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.share, s.names = share, append([]string(nil), names...)
	s.split()
}

// split computes each configured site's part and the parts not in use.
func (s *upstreamSlots) split() {
	if s.sites == nil {
		s.sites = make(map[string]*siteSlots)
	}
	limit, share := s.limit, s.share
	s.reserve = 0
	if n := len(s.names); n >= 2 && share > 0 {
		// One site has nobody to be kept from. A site's part is at least
		// one slot when there is a share at all, and the parts never add
		// up to more than the pool.
		s.reserve = min(max(1, int(float64(limit)*share)/n), limit/n)
	}
	configured := make(map[string]bool, len(s.names))
	for _, name := range s.names {
		configured[name] = true
		if s.sites[name] == nil {
			s.sites[name] = &siteSlots{name: name}
		}
	}
	s.unused = 0
	for name, site := range s.sites {
		site.configured = configured[name]
		switch {
		case site.configured:
			s.unused += max(0, s.reserve-site.used)
		case site.used == 0:
			delete(s.sites, name)
		}
	}
}

// acquire takes a slot for a request of site ("" for none), or says why
// not.
func (s *upstreamSlots) acquire(site string) (upstreamSlot, string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.used >= s.limit {
		return upstreamSlot{}, refusedOverload
	}
	ss := s.sites[site]
	own := ss != nil && ss.configured && ss.used < s.reserve
	if !own && s.used+s.unused >= s.limit {
		return upstreamSlot{}, refusedSiteOverload
	}
	if ss == nil {
		ss = &siteSlots{name: site}
		s.sites[site] = ss
	}
	ss.used++
	s.used++
	if own {
		s.unused--
	}
	return upstreamSlot{slots: s, site: ss}, ""
}

// release gives the slot back. Each slot is released once: callers that
// may reach it twice use releaser.
func (sl upstreamSlot) release() {
	s := sl.slots
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	ss := sl.site
	ss.used--
	s.used--
	switch {
	case ss.configured && ss.used < s.reserve:
		s.unused++
	case !ss.configured && ss.used == 0 && s.sites[ss.name] == ss:
		delete(s.sites, ss.name) // a removed site's last request, or a request of no site
	}
}

// held reports whether sl is a slot taken.
func (sl upstreamSlot) held() bool { return sl.slots != nil }

// releaser returns a func that gives the slot back once, however often it
// is called: a spooled stream gives it back when its body is in, and the
// request again when it ends.
func (sl upstreamSlot) releaser() func() {
	var once sync.Once
	return func() { once.Do(sl.release) }
}

// inUse returns the slots each site holds (sites holding none included
// when configured), for the status page and /metrics.
func (s *upstreamSlots) inUse() (bySite map[string]int, reserve int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	bySite = make(map[string]int, len(s.sites))
	for name, ss := range s.sites {
		bySite[name] = ss.used
	}
	return bySite, s.reserve
}

// acquireUpstream takes one of the limits.max_inflight slots for r's
// site, or returns why not: its client is at its bound (mayLead: the
// fills its requests left count; a peer's request is the ingress's to
// bound), or the slots are taken. Hits never need one, so a flood of slow
// uploads or slow origins cannot stop them.
func (h *Handler) acquireUpstream(r *http.Request) (upstreamSlot, string) {
	if !inboundOf(r).Relayed && !h.clients.mayLead(clientaddr.OfRemote(r.RemoteAddr)) {
		return upstreamSlot{}, refusedClient
	}
	return h.upstream.acquire(h.slotSite(r))
}

// slotSite names the site whose part of the slots r uses: the site the
// front resolved, else the one its Host names ("" for none).
func (h *Handler) slotSite(r *http.Request) string {
	if s := inboundOf(r).Site; s != nil {
		return s.Name
	}
	if h.cfg.SiteFor != nil {
		if s := h.cfg.SiteFor(r.Host); s != nil {
			return s.Name
		}
	}
	return ""
}

// UpstreamBySite returns the upstream slots each site holds now and the
// part of limits.max_inflight kept for each (0: one pool).
func (h *Handler) UpstreamBySite() (map[string]int, int) { return h.upstream.inUse() }

// refuseOverload answers a request no slot could be taken for.
func (h *Handler) refuseOverload(w http.ResponseWriter, r *http.Request, why string) string {
	w.Header().Set("Retry-After", "1")
	switch why {
	case refusedClient:
		return h.refuse(w, r, http.StatusTooManyRequests, why, "too many requests in flight from this client")
	case refusedSiteOverload:
		return h.refuse(w, r, http.StatusServiceUnavailable, why, "too many requests in flight; the free ones are kept for other sites")
	}
	return h.refuse(w, r, http.StatusServiceUnavailable, why, "too many requests in flight")
}
