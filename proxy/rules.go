package proxy

import (
	"net/http"
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
	header http.Header // the request's Cookie as it came, for cookie conditions (nil: none)
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
	g := &ruling{set: in.Site.Rules, site: in.Site.Name, method: r.Method, path: path}
	if c := r.Header["Cookie"]; len(c) > 0 {
		// The cookies as the request came, for cookie conditions: a
		// rule's strip_cookies empties the request's own field later.
		g.header = http.Header{"Cookie": c}
	}
	g.req = g.set.ForRequest(r.Method, path, r.Header)
	g.key = g.set.ForKey(path, r.URL.RawQuery)
	if g.key.IsAmbiguousPath() {
		// The key rule's reading of the path is ambiguous: the request
		// passes, whatever its own rule (a cookie rule ahead of the key
		// rule is no reason to share it: a review's leak).
		g.req = g.key
	}
	in.ruling = g
	return g
}

// response returns the rule for a response of status (nil: none).
func (g *ruling) response(status int) *rules.Rule {
	if g == nil {
		return nil
	}
	// A HEAD's answer is a GET's without its body (RFC 9110 §9.3.2), and
	// the two share entries: an answer is stored and sent with the GET's
	// rule's lifetime, edits and browser_ttl, whichever method filled it.
	// (A HEAD under a rule of its own stored the origin's answer with that
	// rule's lifetime and edits, and every GET was served it: a day's
	// ttl past the GET rule's max_ttl, a field the GET rule removes; a
	// review's proxy/review_s54_headrule_test.go.)
	method := g.method
	if method == http.MethodHead {
		method = http.MethodGet
	}
	return g.set.ForResponse(method, g.path, g.header, status)
}

// lifetime is what the rules say of a response of status's lifetime
// (nil: nothing).
func (g *ruling) lifetime(status int) *rules.Lifetime {
	if r := g.response(status); r != nil && r.Lifetime.Sets() {
		return &r.Lifetime
	}
	return nil
}

// lifetimeShared reports whether the rules give every request of a key the
// lifetime they give this one: no rule that matches on a cookie sets a
// lifetime (a bypass for logged-in users, the usual one, does not), and
// the request is a GET (a rule may name HEAD alone). Only then may an entry
// rebuilt under this request's lifetime (a disk hit) be kept for others.
func (g *ruling) lifetimeShared() bool {
	return g == nil || (!g.set.CookieLifetimes() && g.method == http.MethodGet)
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
	if g.stripsCookies() {
		delete(r.Header, "Cookie")
	}
	sanitize(r)
	if g.sortsQuery() && r.URL.RawQuery != "" {
		r.URL.RawQuery = SortedQuery(r.URL.RawQuery)
	}
	if kr := g.keyRule(); kr != nil && kr.Bypass {
		// The key rule (the GET's, without cookie conditions) keeps the
		// URL out of the store: a HEAD or a cookie's holder under a rule
		// of its own does not fill it, or bob's HEAD was answered from
		// alice's (a review's TestS72HeadRuleFillsAPathTheGetRuleBypasses).
		bypass = true
	}
	if rule == nil {
		return bypass
	}
	rule.Request.ApplyTo(r.Header)
	return bypass || rule.Bypass
}

// stripsCookies reports whether the request's cookies go, and the
// answer's Set-Cookie: its rule says so, or the key rule does (the GET's
// under which the answer is shared: a HEAD-only or cookie rule ahead of
// it sent alice's cookie to the origin and stored what it made of it for
// everyone; a review's TestS72HeadRuleForwardsTheCookiesTheGetRuleStrips).
func (g *ruling) stripsCookies() bool {
	if r := g.requestRule(); r != nil && r.StripCookies {
		return true
	}
	kr := g.keyRule()
	return kr != nil && kr.StripCookies
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
	if g.stripsCookies() {
		delete(resp.Header, "Set-Cookie")
	}
	if r := g.response(resp.StatusCode); r != nil {
		r.Response.ApplyTo(resp.Header)
	}
}

// apply304Rule edits a 304's fields as the response rule of the stored
// entry's status says, before they are merged into the entry: a 304
// carries fields of the answer it validates, which the rule for that
// answer must see (a rule matching status 200 would not match the 304).
func (g *ruling) apply304Rule(resp *http.Response, storedStatus int) {
	if r := g.response(storedStatus); r != nil {
		r.Response.ApplyTo(resp.Header)
	}
}

// sortsQuery reports whether the key rule sorts the query, which is
// then forwarded sorted too: an origin that reads the first of two
// parameters of one name must answer what the shared key stands for.
func (g *ruling) sortsQuery() bool {
	r := g.keyRule()
	return r != nil && r.Query.Sort
}

// uniformEdits is the fields the request's rule sets when every request
// sharing the key is sent them with the same values: the request's rule
// is the key rule, and no rule of the set depends on a cookie (so the
// rule, like the key, is a function of the path). Such a field says
// nothing of the request and is not keyed (fieldKey): a shared secret
// for the origin (request_headers: {set: {X-Origin-Token: …}}) made every
// request a keyed variant, never sliced and never answered by the hit
// path (a review's test).
//
// GET and HEAD share entries, so both must get the rule: a HEAD under a
// rule of its own ahead of the key rule filled the entry without the
// field, and GETs were served that (a review's poisoning).
func (g *ruling) uniformEdits() [][2]string {
	if g == nil || g.req == nil || len(g.req.Request.Set) == 0 || !setsUniformly(g.set, g.req, g.key, g.path) {
		return nil
	}
	return g.req.Request.Set
}

// editKey is the part of a request's variant key that names the rule
// whose request edits the origin saw, when not every request sharing the
// key is sent them (setsUniformly): a HEAD under a rule of its own, or a
// rule that matches on a cookie. fieldKey keys only the fields the cache
// does not know; a standard one a rule sets or removes (User-Agent,
// Accept-Language) changed the origin's answer just the same, and the
// answer made without the edit was served to requests made with it (a
// review's TestS54HeadRuleFillIsServedToAGetWhoseRuleSetsAStandardField,
// TestS54CookieRuleEditOfAStandardFieldIsServedToEveryone).
//
// A request whose own rule edits nothing has one too when the key rule
// edits (a HEAD under a rule of its own ahead of a rule that sets the
// origin's token): the plain variant is then only ever what the key
// rule's edits made, and a reload that drops the HEAD rule (the token now
// uniform, read from the plain variant) finds no fill made without the
// token there (a review's TestS54ReloadThatDropsAHeadRuleServesItsFillToGets).
func (g *ruling) editKey() string {
	if g == nil || !editsApart(g.set, g.req, g.key, g.path) {
		return ""
	}
	return fieldKeySep + "rule " + g.req.Name
}

// editsApart reports whether a request under req (its rule) and key (its
// key rule) may have been sent request edits other requests of its key
// are not: either rule edits, and not uniformly (setsUniformly). Such a
// request's answer is a variant of its own (editKey), which the hit path,
// reading only the plain variant, leaves to ServeHTTP.
func editsApart(set *rules.Set, req, key *rules.Rule, path string) bool {
	if req == nil || req.Request.Empty() && (key == nil || key.Request.Empty()) {
		return false
	}
	return !setsUniformly(set, req, key, path)
}

// setsUniformly reports whether the fields req (a request's rule) sets go
// with the same values to every request that shares key's entries (the
// condition of uniformEdits). Where they do not, ServeHTTP keys a request
// by the fields its rule set, and the hit path, which reads only the
// plain variant, must step aside (AppendHit).
func setsUniformly(set *rules.Set, req, key *rules.Rule, path string) bool {
	return req == key && !set.NeedsHeader() && set.ForRequest(http.MethodHead, path, nil) == key
}

// keyExtra is what the key rule adds to r's key ("" when nothing).
func (g *ruling) keyExtra(h http.Header) string { return g.keyRule().KeyExtra(h) }

// storableUnder is Policy.storable with the rules' lifetime: a response
// the origin gave no freshness, which the rules give one, may be stored.
// Every other reason stands.
func (p *Policy) storableUnder(life *rules.Lifetime, reqCC CacheControl, reqHasAuth bool, status int, h http.Header) (bool, reason) {
	cc, targeted := p.effectiveCC(h)
	ok, why := p.storable(http.MethodGet, reqCC, reqHasAuth, status, h, cc, targeted)
	if !ok && (why == whyNoFreshness || why == whyRequestError) && ruleStores(life, status) {
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
	if !l.AppliesTo(e.Status) {
		return // lifetimes and stale windows alike are for the statuses the rule names
	}
	explicit := e.cc.SMaxAge != unset || e.cc.MaxAge != unset || (!targeted && len(e.Header["Expires"]) > 0)
	var operator bool
	e.lifetime, operator = l.Apply(e.Status, e.lifetime, explicit)
	if operator {
		// The origin said nothing of freshness, or less than the rule
		// gives: the operator's word is a heuristic as far as sharing
		// goes (shareable), so that an answer the origin personalised
		// and kept short-lived is not stored from a request with a
		// cookie or credentials.
		e.heuristic = true
	}
	// A stale window longer than the origin's own lengthens what the
	// origin let others be served as well: an answer the origin marked
	// max-age=0 (revalidate before every use) must not reach the next
	// user stale because a rule says stale_while_revalidate, when the
	// request carried a cookie or credentials (a review's leak).
	if l.SWR != rules.Unset {
		if w := int(l.SWR / time.Second); w > max(e.cc.StaleWhile, 0) {
			e.heuristic = true
		}
		e.cc.StaleWhile = int(l.SWR / time.Second)
	}
	if l.SIE != rules.Unset {
		if w := int(l.SIE / time.Second); w > max(e.cc.StaleIfError, 0) {
			e.heuristic = true
		}
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
}

// hit counts a fresh hit of the hit path under rule. The child counter
// is resolved once and kept in the rule's slot (the hit path does not
// hash label values per request); a reload's new rules start empty and
// the old ones go with their set.
func (m ruleMetrics) hit(site string, set *rules.Set, rule *rules.Rule) {
	if c, ok := rule.Slot.Load().(prometheus.Counter); ok {
		c.Inc()
		return
	}
	if set.Retired() {
		return // its site is gone (ForgetSite): no series again
	}
	c := m.requests.WithLabelValues(site, rule.Name, ResultHit)
	rule.Slot.Store(c)
	c.Inc()
}

func newRuleMetrics(reg prometheus.Registerer) ruleMetrics {
	m := ruleMetrics{requests: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "edge_rule_requests_total",
		Help: "Clients' requests (not peers' climbs) by the cache rule that matched them (configured names only), by site and result (hit, miss, pass, …): a rule's hit ratio and origin load.",
	}, []string{"site", "rule", "result"})}
	m.origin = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "edge_rule_origin_requests_total",
		Help: "Requests sent upstream (fills, revalidations, passes, slices) on behalf of requests under each cache rule, by site and rule.",
	}, []string{"site", "rule"})
	reg.MustRegister(m.requests, m.origin)
	return m
}

// ForgetSite deletes the rule series of a site a reload removed, so that
// dashboards do not show it for the life of the process. Its rules are
// retired first: a request still under them counts nothing, where by
// label it made the series again (a review's
// TestS57RequestInFlightOnARemovedSiteBringsBackItsSeries).
func (h *Handler) ForgetSite(s *Site) {
	s.Rules.Retire()
	h.metrics.rules.requests.DeletePartialMatch(prometheus.Labels{"site": s.Name})
	h.metrics.rules.origin.DeletePartialMatch(prometheus.Labels{"site": s.Name})
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
	if r == nil || g.set.Retired() {
		return
	}
	h.metrics.rules.requests.WithLabelValues(g.site, r.Name, result).Inc()
}
