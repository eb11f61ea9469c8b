// Package proxy owns the HTTP data path of an edge node: the RFC 9111
// caching rules, the byte-bounded store, request coalescing, purge and the
// client-facing limits. Where a response comes from on a miss (the origin,
// or peers in a cluster) is hidden behind the one-method Fetcher interface.
package proxy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/golang-lru/v2/expirable"
)

// Fetcher gets a response for a request the local store cannot answer. The
// request carries a path-relative URL; the fetcher decides where it goes.
// A fetcher may set the response field HeaderStore to "0" to ask that the
// response not be stored here; the handler removes it before the client.
type Fetcher interface {
	Fetch(ctx context.Context, req *http.Request) (*http.Response, error)
}

// HeaderStore is the fetcher-to-handler signal "0: do not store here".
const HeaderStore = "Edge-Store"

// Config are the handler's settings. DefaultConfig gives working values.
type Config struct {
	NodeID               string        // names this cache in Cache-Status and Via
	Policy               Policy        // caching choices RFC 9111 leaves to the operator
	MaxObjectBytes       int64         // larger responses are streamed, not stored
	CoalesceTimeout      time.Duration // how long a waiter waits for another request's fetch
	PassTTL              time.Duration // how long an uncacheable URL skips coalescing (hit-for-pass)
	MaxURLBytes          int           // request-target length limit (414)
	MaxInflight          int           // concurrent client requests (503 beyond)
	MaxInflightPerClient int           // concurrent requests per client IP (429 beyond); 0 = off
	MaxBodyBytes         int64         // request body limit (413)
	RefreshTimeout       time.Duration // budget of a background revalidation
	Now                  func() time.Time
}

// DefaultConfig returns the defaults the config file documents.
func DefaultConfig() Config {
	return Config{
		NodeID: "edge",
		Policy: Policy{
			HeuristicFraction:   0.1,             // RFC 9111 §4.2.2's typical 10 %
			HeuristicMax:        24 * time.Hour,  // keeps a years-old Last-Modified from pinning a page for weeks
			StaleIfErrorDefault: 5 * time.Minute, // rides out a short origin outage without violating intent much
			StaleCeiling:        24 * time.Hour,  // no directive may keep stale content longer than a day
			TargetedFields:      []string{"Edge-Cache-Control", "CDN-Cache-Control", "Surrogate-Control"},
			SurrogateDevice:     "edge", // the token origins target with Surrogate-Control: max-age=60;edge
		},
		MaxObjectBytes:       8 << 20,          // keeps one object from flushing a large share of a small store
		CoalesceTimeout:      5 * time.Second,  // a waiter never waits longer than a slow origin fetch would take anyway
		PassTTL:              30 * time.Second, // re-learn quickly when an uncacheable URL becomes cacheable
		MaxURLBytes:          8192,             // the common limit of browsers and servers
		MaxInflight:          10000,            // bounds goroutines and memory under overload
		MaxInflightPerClient: 0,                // off: many users share a NAT address
		MaxBodyBytes:         32 << 20,         // uploads pass through; this bounds abuse
		RefreshTimeout:       30 * time.Second, // a background refresh must end even if the origin hangs
	}
}

// Handler is the caching reverse proxy.
type Handler struct {
	cfg     Config
	store   *Store
	fetcher Fetcher
	co      *coalescer
	passes  *expirable.LRU[string, struct{}]
	metrics *Metrics
	log     *slog.Logger
	sem     chan struct{}
	clients clientLimiter
	now     func() time.Time

	via          string   // our Via element
	viaOnly      []string // Via of a response that had none; shared, read-only
	statusPrefix string   // "<node>; "
	hitStatus    []string // Cache-Status of a fresh hit; shared, read-only
	bufPool      sync.Pool
	refreshWG    sync.WaitGroup
	hot          *hotKeys
}

// New returns a handler that answers from store and fetches misses with f.
func New(cfg Config, store *Store, f Fetcher, m *Metrics, log *slog.Logger) *Handler {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	h := &Handler{
		cfg: cfg, store: store, fetcher: f, co: newCoalescer(), metrics: m, log: log,
		passes:       expirable.NewLRU[string, struct{}](10000, nil, cfg.PassTTL),
		sem:          make(chan struct{}, cfg.MaxInflight),
		now:          cfg.Now,
		via:          "1.1 " + cfg.NodeID,
		statusPrefix: cfg.NodeID + "; ",
		hitStatus:    []string{cfg.NodeID + "; hit"},
		viaOnly:      []string{"1.1 " + cfg.NodeID},
	}
	h.clients.limit = cfg.MaxInflightPerClient
	h.hot = newHotKeys(64)
	h.bufPool.New = func() any { b := make([]byte, 32<<10); return &b }
	return h
}

// Store returns the handler's store.
func (h *Handler) Store() *Store { return h.store }

// HotKeys returns the n most requested URL keys (estimated from a sample).
func (h *Handler) HotKeys(n int) []HotKey { return h.hot.top(n) }

// Wait blocks until background refreshes have ended (for shutdown and tests).
func (h *Handler) Wait() { h.refreshWG.Wait() }

// ServeHTTP implements http.Handler.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := h.now()
	if len(r.RequestURI) > h.cfg.MaxURLBytes {
		h.reject(w, http.StatusRequestURITooLong, "url_too_long", "request target too long")
		return
	}
	select {
	case h.sem <- struct{}{}:
		defer func() { <-h.sem }()
	default:
		w.Header().Set("Retry-After", "1")
		h.reject(w, http.StatusServiceUnavailable, "overload", "too many requests in flight")
		return
	}
	if ip := clientIP(r); !h.clients.acquire(ip) {
		w.Header().Set("Retry-After", "1")
		h.reject(w, http.StatusTooManyRequests, "client_limit", "too many requests in flight from this client")
		return
	} else if h.clients.limit > 0 {
		defer h.clients.release(ip)
	}
	if r.ContentLength > h.cfg.MaxBodyBytes {
		h.reject(w, http.StatusRequestEntityTooLarge, "body_too_large", "request body too large")
		return
	}
	if r.Body != nil && r.Body != http.NoBody {
		r.Body = http.MaxBytesReader(w, r.Body, h.cfg.MaxBodyBytes)
	}
	h.metrics.InFlight.Inc()
	defer h.metrics.InFlight.Dec()
	removeEdgeHeaders(r.Header)

	var result string
	switch r.Method {
	case http.MethodGet, http.MethodHead:
		result = h.serveCacheable(w, r)
	default:
		result = h.servePass(w, r, "method")
	}
	h.metrics.observe(result, h.now().Sub(start).Seconds())
}

func (h *Handler) reject(w http.ResponseWriter, code int, reason, msg string) {
	h.metrics.Rejected.WithLabelValues(reason).Inc()
	h.metrics.Requests.WithLabelValues(ResultRejected).Inc()
	h.writeError(w, code, "fwd=request; detail="+reason, msg)
}

// requestDirectives parses the request's Cache-Control, honouring
// Pragma: no-cache when Cache-Control is absent (RFC 9111 §5.4).
func requestDirectives(r *http.Request) CacheControl {
	cc := ParseCacheControl(r.Header, "Cache-Control")
	if !cc.Present {
		for _, v := range r.Header.Values("Pragma") {
			if containsToken(v, "no-cache") {
				cc.NoCache = true
			}
		}
	}
	return cc
}

// usability says what a stored entry may be used for.
type usability int

const (
	useFresh    usability = iota // serve as is
	useStale                     // serve stale (client's max-stale)
	useSWR                       // serve stale and refresh in the background
	useValidate                  // must be validated first
)

func (h *Handler) usable(e *Entry, reqCC CacheControl, now time.Time) usability {
	age := e.Age(now)
	remaining := e.lifetime - age
	if e.mustRevalidate() || reqCC.NoCache {
		return useValidate
	}
	if reqCC.MaxAge != unset && age > seconds(reqCC.MaxAge) {
		return useValidate
	}
	if reqCC.MinFresh != unset && remaining < seconds(reqCC.MinFresh) {
		return useValidate
	}
	if remaining > 0 {
		return useFresh
	}
	if e.staleForbidden() {
		return useValidate
	}
	if reqCC.MaxStale != unset && -remaining <= seconds(reqCC.MaxStale) {
		return useStale
	}
	if e.cc.StaleWhile != unset && -remaining <= h.cfg.Policy.staleWindow(e.cc.StaleWhile, 0) {
		return useSWR
	}
	return useValidate
}

// authAllowsShared reports whether a stored response may answer a request
// carrying Authorization (RFC 9111 §3.5).
func authAllowsShared(e *Entry) bool {
	return e.cc.Public || e.cc.SMaxAge != unset || e.cc.MustReval
}

// serveCacheable answers GET and HEAD, from the store when it can.
func (h *Handler) serveCacheable(w http.ResponseWriter, r *http.Request) string {
	key := requestKey(r)
	h.hot.observe(key)
	reqCC := requestDirectives(r)
	hasAuth := r.Header.Get("Authorization") != ""
	now := h.now()

	e, vary := h.store.Lookup(key, r.Header)
	if e != nil && hasAuth && !authAllowsShared(e) {
		return h.servePass(w, r, "authorization")
	}
	if e != nil {
		switch h.usable(e, reqCC, now) {
		case useFresh:
			h.writeEntry(w, r, e, now, "hit")
			return ResultHit
		case useStale:
			h.writeEntry(w, r, e, now, "hit; detail=stale")
			return ResultStale
		case useSWR:
			h.writeEntry(w, r, e, now, "hit; detail=stale-while-revalidate")
			h.refreshInBackground(r, key, e)
			return ResultStale
		}
	}
	if reqCC.OnlyIfCache {
		h.writeError(w, http.StatusGatewayTimeout, "fwd=miss; detail=only-if-cached", "not in cache")
		return ResultOnlyIfCached
	}
	if _, pass := h.passes.Get(key); pass && e == nil {
		return h.servePass(w, r, "uncacheable")
	}
	fwd := "uri-miss"
	if e != nil {
		fwd = "stale"
	} else if vary != nil {
		fwd = "vary-miss"
	}
	if reqCC.NoCache {
		fwd = "request"
	}
	return h.fetchAndServe(w, r, key, vary, e, reqCC, hasAuth, fwd)
}

// coalesceKey names one variant of a URL for request merging.
func coalesceKey(key string, vary []string, h http.Header) string {
	if len(vary) == 0 {
		return key
	}
	return key + "\x00" + VaryKey(vary, h)
}

// fetchAndServe fetches key (validating stale if it is not nil), stores what
// may be stored and answers the client.
func (h *Handler) fetchAndServe(w http.ResponseWriter, r *http.Request, key string, vary []string, stale *Entry,
	reqCC CacheControl, hasAuth bool, fwd string) string {
	ckey := coalesceKey(key, vary, r.Header)
	var f *flight
	if !hasAuth {
		var leader bool
		f, leader = h.co.join(ckey)
		if !leader {
			if e := f.wait(r.Context(), h.cfg.CoalesceTimeout); e != nil && VaryKey(e.VaryNames, r.Header) == e.VaryKey {
				h.metrics.Coalesced.Inc()
				h.writeEntry(w, r, e, h.now(), "fwd="+fwd+"; collapsed")
				return ResultCollapsed
			}
			f = nil // fetch for ourselves, without coalescing
		}
	}
	shared := (*Entry)(nil)
	defer func() {
		if f != nil {
			h.co.finish(ckey, f, shared)
		}
	}()

	out := h.outboundRequest(r, r.Context(), true)
	out.Method = http.MethodGet
	if stale != nil {
		setValidators(out.Header, stale)
	}
	reqTime := h.now()
	resp, err := h.fetch(out)
	if err != nil {
		if stale != nil && h.staleOnErrorOK(stale, reqCC, h.now()) {
			h.writeEntry(w, r, stale, h.now(), "fwd=stale; detail=origin-error")
			return ResultStaleError
		}
		h.writeUpstreamError(w, err)
		return ResultError
	}
	defer resp.Body.Close()
	respTime := h.now()

	if stale != nil && resp.StatusCode == http.StatusNotModified {
		e := h.updateFrom304(stale, resp, reqTime, respTime)
		if e.VaryKey == VaryKey(e.VaryNames, r.Header) {
			shared = e
		}
		h.store.Put(e)
		h.writeEntry(w, r, e, respTime, "fwd="+fwd+"; fwd-status=304")
		return ResultRevalidated
	}
	if stale != nil && resp.StatusCode >= 500 && h.staleOnErrorOK(stale, reqCC, respTime) {
		h.writeEntry(w, r, stale, respTime, "fwd=stale; fwd-status="+strconv.Itoa(resp.StatusCode)+"; detail=origin-error")
		return ResultStaleError
	}

	cc, targeted := h.cfg.Policy.effectiveCC(resp.Header)
	ok, why := h.cfg.Policy.storable(http.MethodGet, reqCC, hasAuth, resp.StatusCode, resp.Header, cc, targeted)
	if ok && resp.ContentLength > h.cfg.MaxObjectBytes {
		ok, why = false, "too-large"
	}
	// The fetcher may say "do not keep a copy here" (the q-rule of the
	// cluster's random trees): the response is shared with waiters but not
	// stored. The signal never reaches the client.
	keepLocal := resp.Header.Get(HeaderStore) != "0"
	resp.Header.Del(HeaderStore)
	if !ok {
		h.metrics.NotStored.WithLabelValues(why).Inc()
		if why != "too-large" && why != "request-no-store" && why != "status" {
			h.passes.Add(key, struct{}{})
		}
		if stale != nil && why != "status" {
			h.store.Remove(key)
		}
		h.stream(w, r, resp, h.statusPrefix+"fwd="+fwd+"; fwd-status="+strconv.Itoa(resp.StatusCode)+"; detail="+why, nil)
		return ResultMiss
	}
	body, complete, err := readUpTo(resp.Body, h.cfg.MaxObjectBytes)
	if err != nil {
		h.log.Debug("reading upstream body", "key", key, "err", err)
		h.writeUpstreamError(w, err)
		return ResultError
	}
	if !complete {
		h.metrics.NotStored.WithLabelValues("too-large").Inc()
		h.stream(w, r, resp, h.statusPrefix+"fwd="+fwd+"; fwd-status="+strconv.Itoa(resp.StatusCode)+"; detail=too-large", body)
		return ResultMiss
	}
	e := h.newEntry(key, r.Header, resp, body, reqTime, respTime)
	if e.VaryKey == VaryKey(e.VaryNames, r.Header) {
		shared = e
	}
	if !keepLocal {
		h.metrics.NotStored.WithLabelValues("q-rule").Inc()
		h.writeEntry(w, r, e, respTime, "fwd="+fwd+"; fwd-status="+strconv.Itoa(resp.StatusCode)+"; detail=q-rule")
		return ResultMiss
	}
	if h.store.Put(e) {
		h.passes.Remove(key)
	}
	h.writeEntry(w, r, e, respTime, "fwd="+fwd+"; fwd-status="+strconv.Itoa(resp.StatusCode)+"; stored")
	return ResultMiss
}

// fetch sends req upstream and counts the outcome.
func (h *Handler) fetch(req *http.Request) (*http.Response, error) {
	t := h.now()
	resp, err := h.fetcher.Fetch(req.Context(), req)
	h.metrics.OriginDuration.Observe(h.now().Sub(t).Seconds())
	if err != nil {
		h.metrics.OriginRequests.WithLabelValues("error").Inc()
		return nil, err
	}
	h.metrics.OriginRequests.WithLabelValues(statusClass(resp.StatusCode)).Inc()
	return resp, nil
}

func statusClass(code int) string {
	switch {
	case code < 200:
		return "1xx"
	case code < 300:
		return "2xx"
	case code < 400:
		return "3xx"
	case code < 500:
		return "4xx"
	}
	return "5xx"
}

// staleOnErrorOK reports whether e may be served because the origin failed.
func (h *Handler) staleOnErrorOK(e *Entry, reqCC CacheControl, now time.Time) bool {
	if e.staleForbidden() && !e.stale.Load() {
		return false
	}
	staleness := e.Age(now) - e.lifetime
	if staleness <= 0 {
		return true
	}
	window := h.cfg.Policy.staleWindow(e.cc.StaleIfErr, h.cfg.Policy.StaleIfErrorDefault)
	if reqCC.StaleIfErr != unset {
		if w := h.cfg.Policy.staleWindow(reqCC.StaleIfErr, 0); w > window {
			window = w
		}
	}
	return staleness <= window
}

// newEntry builds a stored entry from an upstream response and its body.
func (h *Handler) newEntry(key string, reqHeader http.Header, resp *http.Response, body []byte, reqTime, respTime time.Time) *Entry {
	hdr := resp.Header.Clone()
	removeHopByHop(hdr)
	if h.cfg.Policy.StoreSetCookie {
		hdr.Del("Set-Cookie")
	}
	hdr["Content-Length"] = []string{strconv.Itoa(len(body))}
	names, _ := VaryNames(hdr)
	e := &Entry{
		Key: key, VaryNames: names, VaryKey: VaryKey(names, reqHeader),
		Status: resp.StatusCode, Header: hdr, Body: body,
		RequestTime: reqTime, ResponseTime: respTime,
	}
	h.cfg.Policy.finishEntry(e)
	return e
}

// updateFrom304 returns a copy of stale with the header fields of a 304
// applied (RFC 9111 §3.2), sharing the stored body.
func (h *Handler) updateFrom304(stale *Entry, resp *http.Response, reqTime, respTime time.Time) *Entry {
	hdr := stale.Header.Clone()
	upd := resp.Header.Clone()
	removeHopByHop(upd)
	// Fields that describe the stored body, or select it, stay as stored:
	// a 304 cannot change the representation it validated (RFC 9111 §3.2).
	for _, k := range [...]string{"Content-Length", "Content-Encoding", "Content-Range", "Content-Md5", "Etag"} {
		upd.Del(k)
	}
	if h.cfg.Policy.StoreSetCookie {
		upd.Del("Set-Cookie")
	}
	for k, v := range upd {
		hdr[k] = v
	}
	e := &Entry{
		Key: stale.Key, VaryNames: stale.VaryNames, VaryKey: stale.VaryKey,
		Status: stale.Status, Header: hdr, Body: stale.Body,
		RequestTime: reqTime, ResponseTime: respTime,
	}
	h.cfg.Policy.finishEntry(e)
	return e
}

// setValidators turns out into a conditional request for e.
func setValidators(hdr http.Header, e *Entry) {
	if e.etag != "" {
		hdr.Set("If-None-Match", e.etag)
	}
	if lm := e.Header.Get("Last-Modified"); lm != "" {
		hdr.Set("If-Modified-Since", lm)
	}
}

// outboundRequest copies r for the upstream. With forFill the client's own
// conditional and range fields are dropped: the cache fetches the whole
// response so that it can store it and answer them itself.
func (h *Handler) outboundRequest(r *http.Request, ctx context.Context, forFill bool) *http.Request {
	out := r.Clone(ctx)
	out.RequestURI = ""
	out.Header = r.Header.Clone()
	removeHopByHop(out.Header)
	if forFill {
		for _, k := range [...]string{"If-None-Match", "If-Modified-Since", "If-Match", "If-Unmodified-Since", "Range", "If-Range"} {
			out.Header.Del(k)
		}
		out.Body = http.NoBody
		out.ContentLength = 0
	}
	out.Header.Add("Via", h.via)
	if d := h.cfg.Policy.SurrogateDevice; d != "" {
		out.Header.Set("Surrogate-Capability", d+`="Surrogate/1.0"`)
	}
	if ip := clientIP(r); ip != "" {
		if prior := out.Header.Get("X-Forwarded-For"); prior != "" {
			out.Header.Set("X-Forwarded-For", prior+", "+ip)
		} else {
			out.Header.Set("X-Forwarded-For", ip)
		}
	}
	if out.Header.Get("X-Forwarded-Host") == "" {
		out.Header.Set("X-Forwarded-Host", r.Host)
	}
	if r.TLS != nil {
		out.Header.Set("X-Forwarded-Proto", "https")
	} else {
		out.Header.Set("X-Forwarded-Proto", "http")
	}
	return out
}

// servePass forwards r without using or filling the store. Unsafe methods
// invalidate what they may have changed (RFC 9111 §4.4).
func (h *Handler) servePass(w http.ResponseWriter, r *http.Request, why string) string {
	out := h.outboundRequest(r, r.Context(), false)
	resp, err := h.fetch(out)
	if err != nil {
		h.writeUpstreamError(w, err)
		return ResultError
	}
	defer resp.Body.Close()
	if !isSafe(r.Method) && resp.StatusCode < 400 {
		h.invalidate(r, resp)
	}
	h.stream(w, r, resp, h.statusPrefix+"fwd=bypass; fwd-status="+strconv.Itoa(resp.StatusCode)+"; detail="+why, nil)
	return ResultPass
}

func isSafe(method string) bool {
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace:
		return true
	}
	return false
}

// invalidate removes the target URI and the same-origin Location and
// Content-Location URIs of a successful unsafe request.
func (h *Handler) invalidate(r *http.Request, resp *http.Response) {
	n := h.store.Remove(requestKey(r))
	for _, field := range [...]string{"Location", "Content-Location"} {
		v := resp.Header.Get(field)
		if v == "" {
			continue
		}
		u, err := r.URL.Parse(v)
		if err != nil {
			continue
		}
		if u.Host != "" && !strings.EqualFold(u.Host, r.Host) {
			continue // another origin's URI: RFC 9111 §4.4 forbids invalidating it
		}
		scheme := "http"
		if r.TLS != nil {
			scheme = "https"
		}
		n += h.store.Remove(CacheKey(scheme, r.Host, u.EscapedPath(), u.RawQuery))
	}
	h.metrics.Invalidations.Add(float64(n))
}

// refreshInBackground revalidates e once, however many requests see it stale.
func (h *Handler) refreshInBackground(r *http.Request, key string, e *Entry) {
	ckey := coalesceKey(key, e.VaryNames, r.Header)
	f, leader := h.co.lead(ckey)
	if !leader {
		return // a fetch for this variant is already under way
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), h.cfg.RefreshTimeout)
	out := h.outboundRequest(r, ctx, true)
	out.Method = http.MethodGet
	setValidators(out.Header, e)
	h.refreshWG.Add(1)
	go func() {
		defer h.refreshWG.Done()
		defer cancel()
		var fresh *Entry
		defer func() { h.co.finish(ckey, f, fresh) }()
		reqTime := h.now()
		resp, err := h.fetch(out)
		if err != nil {
			h.metrics.Refreshes.WithLabelValues("error").Inc()
			return
		}
		defer resp.Body.Close()
		respTime := h.now()
		switch {
		case resp.StatusCode == http.StatusNotModified:
			fresh = h.updateFrom304(e, resp, reqTime, respTime)
		case resp.StatusCode >= 500:
			h.metrics.Refreshes.WithLabelValues("error").Inc()
			return
		default:
			cc, targeted := h.cfg.Policy.effectiveCC(resp.Header)
			if ok, _ := h.cfg.Policy.storable(http.MethodGet, CacheControl{MaxAge: unset, SMaxAge: unset}, false, resp.StatusCode, resp.Header, cc, targeted); !ok {
				h.store.Remove(key)
				h.metrics.Refreshes.WithLabelValues("uncacheable").Inc()
				return
			}
			body, complete, err := readUpTo(resp.Body, h.cfg.MaxObjectBytes)
			if err != nil || !complete {
				h.metrics.Refreshes.WithLabelValues("error").Inc()
				return
			}
			fresh = h.newEntry(key, out.Header, resp, body, reqTime, respTime)
			fresh.VaryKey = e.VaryKey
		}
		h.store.Put(fresh)
		h.metrics.Refreshes.WithLabelValues("ok").Inc()
	}()
}

// readUpTo reads at most limit bytes of r. complete is false when r had more.
func readUpTo(r io.Reader, limit int64) (body []byte, complete bool, err error) {
	b, err := io.ReadAll(io.LimitReader(r, limit+1))
	if err != nil {
		return nil, false, err
	}
	if int64(len(b)) > limit {
		return b, false, nil
	}
	return b, true, nil
}

// writeUpstreamError answers a client when the upstream failed.
func (h *Handler) writeUpstreamError(w http.ResponseWriter, err error) {
	code := http.StatusBadGateway
	detail := "upstream-error"
	var ne net.Error
	if errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout()) {
		code, detail = http.StatusGatewayTimeout, "upstream-timeout"
	}
	if errors.Is(err, context.Canceled) {
		detail = "client-gone"
	}
	h.writeError(w, code, "fwd=miss; detail="+detail, fmt.Sprintf("%d %s", code, http.StatusText(code)))
}

// writeError answers with a short text error that still carries our
// Cache-Status and Via, so a client can tell which node refused it and why.
func (h *Handler) writeError(w http.ResponseWriter, code int, cacheStatus, msg string) {
	w.Header().Set("Cache-Status", h.statusPrefix+cacheStatus)
	w.Header().Set("Via", h.via)
	w.Header().Set("Cache-Control", "no-store")
	http.Error(w, msg, code)
}

// stream copies an upstream response to the client without storing it.
// prefix holds body bytes already read from resp.Body.
func (h *Handler) stream(w http.ResponseWriter, r *http.Request, resp *http.Response, cacheStatus string, prefix []byte) {
	hdr := w.Header()
	for k, v := range resp.Header {
		hdr[k] = v
	}
	removeHopByHop(hdr)
	hdr.Del(HeaderStore)
	hdr.Add("Via", h.via)
	hdr.Set("Cache-Status", cacheStatus)
	w.WriteHeader(resp.StatusCode)
	if r.Method == http.MethodHead {
		return
	}
	if len(prefix) > 0 {
		if _, err := w.Write(prefix); err != nil {
			return
		}
	}
	bp := h.bufPool.Get().(*[]byte)
	defer h.bufPool.Put(bp)
	if _, err := io.CopyBuffer(w, resp.Body, *bp); err != nil {
		h.log.Debug("streaming response", "err", err)
	}
}

// writeEntry answers r from a stored entry.
func (h *Handler) writeEntry(w http.ResponseWriter, r *http.Request, e *Entry, now time.Time, status string) {
	hdr := w.Header()
	for k, v := range e.Header {
		hdr[k] = v
	}
	hdr["Age"] = ageValue(e.Age(now))
	if status == "hit" {
		hdr["Cache-Status"] = h.hitStatus
	} else {
		hdr["Cache-Status"] = []string{h.statusPrefix + status}
	}
	hdr["Via"] = h.viaFor(e)
	if e.Status == http.StatusOK && needsServeContent(r) {
		h.serveContent(w, r, e)
		return
	}
	w.WriteHeader(e.Status)
	if r.Method != http.MethodHead {
		_, _ = w.Write(e.Body)
	}
}

// needsServeContent is true when the request has conditional or range
// fields that http.ServeContent evaluates for us.
func needsServeContent(r *http.Request) bool {
	hd := r.Header
	return len(hd["Range"]) > 0 || len(hd["If-None-Match"]) > 0 || len(hd["If-Modified-Since"]) > 0 ||
		len(hd["If-Match"]) > 0 || len(hd["If-Unmodified-Since"]) > 0
}

func (h *Handler) serveContent(w http.ResponseWriter, r *http.Request, e *Entry) {
	hdr := w.Header()
	if _, ok := hdr["Content-Type"]; !ok {
		hdr["Content-Type"] = nil // no sniffing: we serve what the origin said
	}
	delete(hdr, "Content-Length")
	http.ServeContent(w, r, "", e.lastMod, bytes.NewReader(e.Body))
}

// ageValues holds the Age field values of the first hour, so the hit path
// does not allocate for them. The slices are shared: nothing may modify them.
var ageValues = func() [3600][]string {
	var a [3600][]string
	for i := range a {
		a[i] = []string{strconv.Itoa(i)}
	}
	return a
}()

func ageValue(d time.Duration) []string {
	s := int64(d / time.Second)
	if s < 0 {
		s = 0
	}
	if s < int64(len(ageValues)) {
		return ageValues[s]
	}
	return []string{strconv.FormatInt(s, 10)}
}

// viaFor returns the Via field of a response served from e: the stored Via
// elements followed by ours, computed once per entry.
func (h *Handler) viaFor(e *Entry) []string {
	if v := e.via.Load(); v != nil {
		return *v
	}
	var v []string
	if vs := e.Header["Via"]; len(vs) > 0 {
		v = append(vs[:len(vs):len(vs)], h.via)
	} else {
		v = h.viaOnly
	}
	e.via.Store(&v)
	return v
}

// clientIP returns the address of the client connection.
func clientIP(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

// clientLimiter bounds concurrent requests per client address.
type clientLimiter struct {
	limit int
	mu    sync.Mutex
	n     map[string]int
}

func (c *clientLimiter) acquire(ip string) bool {
	if c.limit <= 0 {
		return true
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = make(map[string]int)
	}
	if c.n[ip] >= c.limit {
		return false
	}
	c.n[ip]++
	return true
}

func (c *clientLimiter) release(ip string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n[ip] <= 1 {
		delete(c.n, ip)
		return
	}
	c.n[ip]--
}
