package proxy

import (
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/edgecache/edge/rules"
)

// Where a site's cache rules (package rules) act on a request:
//
//   - serve finds the request's rule once (ruling) before anything else
//     reads the request: strip_cookies removes Cookie, request edits are
//     applied after sanitize, bypass passes the request by the store;
//   - the cache key's query (keyOn) and its added fields (varyKey) come
//     from the key rule, the first rule for the path without a cookie
//     condition, so that every node and every spelling of the request
//     computes the same key, the hit path included;
//   - fetch strips Set-Cookie (strip_cookies) and applies the response
//     rule's edits to the upstream answer, after which newEntry gives it
//     the rule's lifetime (finishEntry);
//   - decideHit reads the client's no-cache as the rule (or the policy)
//     says.
//
// None of these can make shared what RFC 9111 keeps private: storable
// and shareable run as before on fields a rule cannot edit, and a
// lifetime that only the operator gave is treated as a heuristic one (not
// shared from a request with a Cookie or credentials).

// ruling is a request's rules: its site's set and what was found for it.
type ruling struct {
	set    *rules.Set
	site   string
	method string
	path   string      // escaped
	header http.Header // the request's fields, for a rule's cookie condition
	req    *rules.Rule // the request's rule (nil: none)
	key    *rules.Rule // the rule that shapes its cache key (nil: none)
}

// rulingOf finds r's rules, once per request (nil: its site has none).
func rulingOf(r *http.Request) *ruling {
	in := inboundOf(r)
	if in.Site == nil || in.Site.Rules == nil || len(in.Site.Rules.Rules) == 0 {
		return nil
	}
	if in.ruling != nil {
		return in.ruling
	}
	path := r.URL.EscapedPath()
	g := &ruling{set: in.Site.Rules, site: in.Site.Name, method: r.Method, path: path, header: r.Header}
	g.req = g.set.ForRequest(r.Method, path, r.Header)
	g.key = g.set.ForKey(path)
	in.ruling = g
	return g
}

// response returns the rule for a response of status (nil: none).
func (g *ruling) response(status int) *rules.Rule {
	if g == nil {
		return nil
	}
	return g.set.ForResponse(g.method, g.path, g.header, status)
}

// lifetime is what the rules say of a response of status's lifetime
// (nil: nothing).
func (g *ruling) lifetime(status int) *rules.Lifetime {
	if r := g.response(status); r != nil && r.Lifetime.Sets() {
		return &r.Lifetime
	}
	return nil
}

// requestRule is the request's rule (nil: none).
func (g *ruling) requestRule() *rules.Rule {
	if g == nil {
		return nil
	}
	return g.req
}

// keyRule is the rule that shapes the key (nil: none).
func (g *ruling) keyRule() *rules.Rule {
	if g == nil {
		return nil
	}
	return g.key
}

// applyRequestRule strips and edits r's fields as its rule says, and
// reports whether the rule bypasses the store.
func applyRequestRule(r *http.Request, g *ruling, sanitize func(*http.Request)) (bypass bool) {
	rule := g.requestRule()
	if rule != nil && rule.StripCookies {
		delete(r.Header, "Cookie")
	}
	sanitize(r)
	if rule == nil {
		return false
	}
	rule.Request.ApplyTo(r.Header)
	return rule.Bypass
}

// applyResponseRule edits an upstream answer to r as the rules say:
// Set-Cookie goes where the request's rule strips cookies, and the
// response rule's edits are made (they cannot touch the fields the
// cache's decisions read: rules refuses such edits at load).
func applyResponseRule(req *http.Request, resp *http.Response) {
	g := inboundOf(req).ruling
	if g == nil {
		return
	}
	if r := g.requestRule(); r != nil && r.StripCookies {
		delete(resp.Header, "Set-Cookie")
	}
	if r := g.response(resp.StatusCode); r != nil {
		r.Response.ApplyTo(resp.Header)
	}
}

// storableUnder is Policy.storable with the rules' lifetime: a response
// the origin gave no freshness, which the rules give one, may be stored.
// Every other reason stands.
func (p *Policy) storableUnder(life *rules.Lifetime, reqCC CacheControl, reqHasAuth bool, status int, h http.Header) (bool, reason) {
	cc, targeted := p.effectiveCC(h)
	ok, why := p.storable(http.MethodGet, reqCC, reqHasAuth, status, h, cc, targeted)
	if !ok && why == whyNoFreshness && life != nil && life.Gives(status) {
		return true, ""
	}
	return ok, why
}

// applyLifetime gives e the rules' lifetime (finishEntry).
func (e *Entry) applyLifetime(targeted bool) {
	l := e.life
	if l == nil {
		return
	}
	if l.AppliesTo(e.Status) {
		explicit := e.cc.SMaxAge != unset || e.cc.MaxAge != unset || (!targeted && len(e.Header["Expires"]) > 0)
		var operator bool
		e.lifetime, operator = l.Apply(e.Status, e.lifetime, explicit)
		if operator {
			// The origin said nothing of freshness: the operator's word
			// is a heuristic as far as sharing goes (shareable).
			e.heuristic = true
		}
	}
	if l.SWR != rules.Unset {
		e.cc.StaleWhile = int(l.SWR / time.Second)
	}
	if l.SIE != rules.Unset {
		e.cc.StaleIfError = int(l.SIE / time.Second)
	}
}

// clientDirectives is what of a client's directives the cache obeys for
// a stored entry e (nil: none), by the request's rule or the policy:
// honour keeps them, ignore drops the ones that ask for the origin
// (no-cache, max-age, min-fresh), coalesce drops them while e was fetched
// or validated within the interval, so that one URL is revalidated at
// most once per interval however many clients ask.
func (h *Handler) clientDirectives(cc CacheControl, g *ruling, e *Entry, now time.Time) CacheControl {
	if !cc.NoCache && cc.MaxAge == unset && cc.MinFresh == unset {
		return cc
	}
	p := h.policy()
	mode, interval := p.ClientNoCache, p.RevalidateInterval
	if r := g.requestRule(); r != nil && r.ClientNoCacheSet {
		mode = r.ClientNoCache
		if r.RevalidateInterval > 0 {
			interval = r.RevalidateInterval
		}
	}
	switch mode {
	case rules.Ignore:
	case rules.Coalesce:
		// Without an entry the answer comes from the origin anyway (or
		// from a fetch under way, as fresh as the origin's): the request
		// joins it rather than fetching again.
		if e != nil && now.Sub(e.ResponseTime) >= interval {
			return cc
		}
	default:
		return cc
	}
	cc.NoCache, cc.MaxAge, cc.MinFresh = false, unset, unset
	h.metrics.clientNoCacheServed.Inc()
	return cc
}

// ruleMetrics count requests per rule.
type ruleMetrics struct {
	requests *prometheus.CounterVec // site, rule, result
	origin   *prometheus.CounterVec // site, rule: requests sent upstream for the rule's requests
	// hits holds each rule's hit counter, resolved once, for the HTTP/1.1
	// hit path (which does not hash label values per request). A reload
	// makes new rules; the old ones' entries are few and stay.
	hits *sync.Map // *rules.Rule → prometheus.Counter
}

// hit counts a fresh hit of the hit path under rule.
func (m ruleMetrics) hit(site string, rule *rules.Rule) {
	if c, ok := m.hits.Load(rule); ok {
		c.(prometheus.Counter).Inc()
		return
	}
	c := m.requests.WithLabelValues(site, rule.Name, ResultHit)
	m.hits.Store(rule, c)
	c.Inc()
}

func newRuleMetrics(reg prometheus.Registerer) ruleMetrics {
	m := ruleMetrics{requests: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "edge_rule_requests_total",
		Help: "Requests by the cache rule that matched them (configured names only), by site and result (hit, miss, pass, …): a rule's hit ratio and origin load.",
	}, []string{"site", "rule", "result"}), hits: new(sync.Map)}
	m.origin = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "edge_rule_origin_requests_total",
		Help: "Requests sent upstream (fills, revalidations, passes, slices) on behalf of requests under each cache rule, by site and rule.",
	}, []string{"site", "rule"})
	reg.MustRegister(m.requests, m.origin)
	return m
}

// RuleRequests returns the requests counted under a site's rule: hit,
// miss, pass, every other result summed as other, and the upstream
// requests made for them (upstream).
func (h *Handler) RuleRequests(site, rule string) map[string]uint64 {
	out := map[string]uint64{"hit": 0, "miss": 0, "pass": 0, "other": 0, "upstream": 0}
	if c, err := h.metrics.rules.origin.GetMetricWithLabelValues(site, rule); err == nil {
		var m dto.Metric
		if c.Write(&m) == nil {
			out["upstream"] = uint64(m.GetCounter().GetValue())
		}
	}
	for result := range h.metrics.byResult {
		c, err := h.metrics.rules.requests.GetMetricWithLabelValues(site, rule, result)
		if err != nil {
			continue
		}
		var m dto.Metric
		if c.Write(&m) != nil {
			continue
		}
		v := uint64(m.GetCounter().GetValue())
		switch result {
		case ResultHit, ResultMiss, ResultPass:
			out[result] += v
		default:
			out["other"] += v
		}
	}
	return out
}

// countRule counts a request's result under its rule.
func (h *Handler) countRule(g *ruling, result string) {
	r := g.requestRule()
	if r == nil {
		return
	}
	h.metrics.rules.requests.WithLabelValues(g.site, r.Name, result).Inc()
}
