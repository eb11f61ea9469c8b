// Package proxy owns the HTTP data path of an edge node: the RFC 9111
// caching rules, the byte-bounded store, request coalescing with streamed
// fills, purge and the client-facing limits. Where a response comes from
// on a miss (the origin, or peers in a cluster) is hidden behind the
// one-method Fetcher interface.
//
// The files split by concern: handler.go serves (the request flow),
// fetch.go fills (one upstream fetch, shared by waiters and by background
// refresh), forward.go shapes what the origin sees, write.go writes
// responses, limits.go guards against hostile clients, ranges.go caps
// Range requests.
package proxy

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"log/slog"
	"net/http"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/golang-lru/v2/expirable"

	"github.com/edgecache/edge/internal/clientaddr"
)

// Fetcher gets a response for a request the local store cannot answer.
// The fetcher decides where the request goes.
type Fetcher interface {
	Fetch(ctx context.Context, req FetchRequest) (Result, error)
}

// FetchRequest is one upstream fetch: the request to send, and what the
// handler knows of it that the request does not say.
type FetchRequest struct {
	Key  string        // the cache key, computed once by the handler
	Req  *http.Request // the request to send; its URL is path-relative
	Site *Site         // the site the front resolved (nil: none did; look Req.Host up)
	// Route is Inbound.Route of the request that caused the fetch, as the
	// front gave it (nil for a client's request): the cluster's state of
	// a climb that reached this node.
	Route any
	// Order is the fetching fill's place in the wait order, which the
	// cluster sends with a climb (waitorder.go).
	Order WaitOrder
	// Direct: the fill was placed as waiting on no peer
	// (PeerWaiter.MayWaitOnPeers said false), so the fetch must not climb.
	Direct bool
	// Revalidates: the fetch revalidates a copy this node holds (a
	// background refresh, or a miss that found its copy stale): another
	// cache's stale copy is no refresh of it (the cluster neither serves
	// one early nor has one kept).
	Revalidates bool
}

// Result is a fetcher's answer.
type Result struct {
	Resp *http.Response
	// Keep says this node should store a copy if the response is
	// storable. False (the cluster's q-rule) still lets the response be
	// shared with requests waiting for the same fetch.
	Keep bool
	// PurgeHeld says Keep is false because a purge naming the page was
	// going round the cluster (cluster/purgehold.go): it is counted and
	// labelled as purged, not as the placement's choice.
	PurgeHeld bool
	// Resumed reports, once the body has ended, whether it was spliced
	// from two sources (a cluster peer's answer that broke, finished by
	// the origin): such a body is served but never stored, since its first
	// part was never authenticated as a whole. Nil: never.
	Resumed func() bool
	// From names who answered, for the access log: "origin" or "peer"
	// ("" is "origin").
	From string
	// Addr is the upstream that answered (an origin's URL, a peer's id;
	// "" when unknown) and Retries the upstreams tried before it, for the
	// access log.
	Addr    string
	Retries int
	// InMemory says the body has already been read whole into memory (a
	// small peer answer, its MAC checked): reading it cannot block, so the
	// fill takes it on the request's goroutine and the client gets the
	// header and the body in one write, without a hand-off to a pump.
	// Resp.ContentLength must then be the body's length (no more than that
	// is read).
	InMemory bool
}

// FetcherFunc adapts a function that returns a response the node always
// keeps (a plain origin client) to a Fetcher.
type FetcherFunc func(ctx context.Context, req *http.Request) (*http.Response, error)

// Fetch implements Fetcher.
func (f FetcherFunc) Fetch(ctx context.Context, fr FetchRequest) (Result, error) {
	resp, err := f(ctx, fr.Req)
	return Result{Resp: resp, Keep: true, From: UpstreamOrigin}, err
}

// The names Result.From gives.
const (
	UpstreamOrigin = "origin"
	UpstreamPeer   = "peer"
)

// Config are the handler's settings. DefaultConfig gives working values.
type Config struct {
	NodeID               string        // names this cache in Cache-Status and Via
	Policy               Policy        // caching choices RFC 9111 leaves to the operator
	MaxObjectBytes       int64         // larger responses are streamed, not stored (unless sliced)
	SliceBytes           int64         // responses larger than this are stored in slices of this size (0: never)
	CoalesceTimeout      time.Duration // how long a request waits for another request's fetch to answer
	PassTTL              time.Duration // how long an uncacheable URL skips coalescing (hit-for-pass)
	MaxURLBytes          int           // request-target length limit (414)
	MaxInflight          int           // concurrent upstream requests (503 beyond); hits never wait for one
	MaxInflightPerClient int           // concurrent requests per client IP (429 beyond); 0 = off
	MaxBodyBytes         int64         // request body limit (413)
	RefreshTimeout       time.Duration // budget of a background revalidation
	// MaxBufferedBytes bounds the bytes held by fills in progress plus
	// stored responses that were evicted while still being sent.
	MaxBufferedBytes int64
	// SpoolDir and SpoolBytes: where, and how much, a response that
	// cannot be stored may spill when its slowest reader falls behind
	// (spool.go); SpoolBytes 0 turns spilling off.
	SpoolDir   string
	SpoolBytes int64
	// RequestBuffering reads a request body of known length whole before
	// its request takes an upstream slot (upload.go); off, every body
	// streams to the origin as it comes and holds its slot meanwhile.
	RequestBuffering bool
	BodyTimeout      time.Duration // grace before a request body must flow at MinBodyRate
	MinBodyRate      int64         // bytes per second a request body must average after the grace
	WriteTimeout     time.Duration // longest a write of one chunk to a client may block
	MaxRanges        int           // ranges honoured in one request, after merging overlaps; more: the whole response
	// TrustedProxies are the client addresses whose X-Forwarded-* and
	// Forwarded fields are kept; everyone else's are replaced.
	TrustedProxies []netip.Prefix
	// StripRequestHeaders are never forwarded (URL-rewrite fields some
	// origin frameworks obey, which would let a client pick the page
	// cached under another URL).
	StripRequestHeaders []string
	// UnkeyedRequestHeaders are fields the operator declares do not change
	// the representation (forwarding.unkeyed_headers), in canonical form:
	// forwarded without being keyed, though reqfield does not know them.
	UnkeyedRequestHeaders []string
	// SortQuery sorts query parameters in both the cache key and the
	// forwarded request. Off: the key keeps the order the client sent.
	SortQuery bool
	// KeyScheme keeps the client's scheme in the cache key (see KeyScheme).
	KeyScheme bool
	// SiteOf names the site of a Host ("" for the one-site shortcut); a
	// named site's keys start with its name. It must be safe for
	// concurrent use (a reload swaps the table under it).
	SiteOf func(host string) string
	// SiteTable returns SiteOf of the table in force now, frozen: what a
	// reload's DropUnreachable judges keys by, for as long as a fill begun
	// before it may end (nil: SiteOf, for a table that never changes).
	SiteTable func() func(host string) string
	// SiteFor is the site that serves a Host (nil: none), whose rules
	// shape the key of a URL named outside a request (a purge, the route
	// explorer) as they shape a request's; nil: no sites, no rules. Safe
	// for concurrent use, as SiteOf.
	SiteFor func(host string) *Site
	// Compression encodes responses for clients that accept it (nil: bodies
	// pass as the origin sent them). See compress.go.
	Compression *Compression
	Now         func() time.Time
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
		CoalesceTimeout:      30 * time.Second, // as long as the origin response timeout: a waiter never starts a second fetch
		PassTTL:              30 * time.Second, // re-learn quickly when an uncacheable URL becomes cacheable
		MaxURLBytes:          8192,             // the common limit of browsers and servers
		MaxInflight:          10000,            // bounds goroutines and memory under overload
		MaxInflightPerClient: 0,                // off: many users share a NAT address
		MaxBodyBytes:         32 << 20,         // uploads pass through; this bounds abuse
		RefreshTimeout:       30 * time.Second, // a background refresh must end even if the origin hangs
		MaxBufferedBytes:     64 << 20,         // a few large fills at once on a small node
		SpoolBytes:           256 << 20,        // slow readers of what cannot be stored free their upstream slot (spool.go)
		RequestBuffering:     true,             // slow uploads cannot take the upstream slots (upload.go)
		BodyTimeout:          10 * time.Second, // a slow mobile upload starts within this
		MinBodyRate:          1024,             // 1 KiB/s: a byte every few seconds is an attack, not a client
		WriteTimeout:         30 * time.Second, // a client that reads nothing for this long is gone
		MaxRanges:            16,               // browsers and download managers ask for one or a few
		StripRequestHeaders:  []string{"X-Original-Url", "X-Rewrite-Url"},
	}
}

// Handler is the caching reverse proxy.
type Handler struct {
	cfg     Config
	store   *Store
	fetcher Fetcher
	co      *coalescer
	passes  *expirable.LRU[string, struct{}] // URLs answered uncacheable (hit-for-pass)
	large   *expirable.LRU[string, struct{}] // URLs whose responses exceed MaxObjectBytes
	metrics *Metrics
	log     *slog.Logger
	unkeyed map[string]struct{} // cfg.UnkeyedRequestHeaders
	// upstream bounds concurrent upstream requests (MaxInflight), a
	// count against a limit rather than a channel's capacity, so that a
	// reload can change the limit (SetLimits), with each site's part of
	// it (SiteReserve, slots.go).
	upstream upstreamSlots
	// formSlots and liveSlots bound the compression work done at once:
	// stored forms made in the background, responses encoded live.
	formSlots, liveSlots chan struct{}
	clients              clientLimiter
	now                  func() time.Time

	buffered atomic.Int64 // bytes charged to MaxBufferedBytes
	// uploadMem, uploadDisk: request bodies' shares of the buffer budget
	// and of the spool (upload.go), so slow uploads cannot take all of either.
	uploadMem, uploadDisk atomic.Int64
	spool                 *spooler // nil: spilling off
	purges                purgeLog // purges so far and what they named: a fill started before one that names its page does not store

	via          string   // our Via element
	viaOnly      []string // Via of a response that had none; shared, read-only
	statusPrefix string   // "<node>; "
	hitStatus    []string // Cache-Status of a fresh hit; shared, read-only
	bufPool      sync.Pool
	bg           background // background refreshes and body pumps
	hot          *hotKeys
	pol          atomic.Pointer[Policy] // cfg.Policy, replaced whole by SetPolicy (live reload)
	slices       flights                // slice fetches under way, by slice key (slice.go, flights.go)
}

// policy returns the caching policy in force. A request reads it once per
// decision; a reload between two decisions of one request is harmless
// (each is a complete, validated policy).
func (h *Handler) policy() *Policy { return h.pol.Load() }

// SetPolicy replaces the caching policy (a live reload). Stored entries
// keep the freshness they were given; new responses use the new policy.
func (h *Handler) SetPolicy(p Policy) { h.pol.Store(&p) }

// SetLimits sets limits.max_inflight and limits.max_inflight_per_client
// (a live reload: an operator tightens them under a flood without losing
// the cache to a restart). Requests under way keep their slots; a lower
// bound refuses new ones until enough have ended.
func (h *Handler) SetLimits(maxInflight, perClient int) {
	h.upstream.setLimit(maxInflight)
	h.clients.limit.Store(int64(perClient))
}

// SetSites sets the sites limits.site_reserve splits its share of the
// upstream slots among, and the share (a reload: the sites a request
// carries, Site.Name).
func (h *Handler) SetSites(names []string, reserve float64) { h.upstream.setSites(reserve, names) }

// New returns a handler that answers from store and fetches misses with f.
func New(cfg Config, store *Store, f Fetcher, m *Metrics, log *slog.Logger) *Handler {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	h := &Handler{
		cfg: cfg, store: store, fetcher: f, metrics: m, log: log,
		passes:       expirable.NewLRU[string, struct{}](10000, nil, cfg.PassTTL),
		large:        expirable.NewLRU[string, struct{}](10000, nil, 10*time.Minute),
		now:          cfg.Now,
		via:          "1.1 " + cfg.NodeID,
		statusPrefix: cfg.NodeID + "; ",
		hitStatus:    []string{cfg.NodeID + "; hit"},
		viaOnly:      []string{"1.1 " + cfg.NodeID},
	}
	h.co, h.slices.purges = newCoalescer(&h.purges), &h.purges
	forms, live := cfg.Compression.slots()
	h.formSlots, h.liveSlots = make(chan struct{}, forms), make(chan struct{}, live)
	h.SetPolicy(cfg.Policy)
	h.unkeyed = make(map[string]struct{}, len(cfg.UnkeyedRequestHeaders))
	for _, name := range cfg.UnkeyedRequestHeaders {
		h.unkeyed[http.CanonicalHeaderKey(name)] = struct{}{}
	}
	h.SetLimits(cfg.MaxInflight, cfg.MaxInflightPerClient)
	h.hot = newHotKeys(64)
	h.bufPool.New = func() any { b := make([]byte, 32<<10); return &b }
	store.OnDrop(h.pinDropped)
	store.OnRevive(h.revive)
	m.buffered = func() float64 { return float64(h.buffered.Load()) }
	if h.spool = newSpooler(cfg.SpoolDir, cfg.SpoolBytes, m.spool); h.spool != nil {
		m.spool.used = func() float64 { return float64(h.spool.used.Load()) }
		m.spool.files = func() float64 { return float64(h.spool.files.Load()) }
	}
	return h
}

// Store returns the handler's store.
func (h *Handler) Store() *Store { return h.store }

// HotKeys returns the n most requested URL keys (estimated from a sample).
func (h *Handler) HotKeys(n int) []HotKey { return h.hot.top(n) }

// Wait blocks until background refreshes and fills have ended (for tests).
func (h *Handler) Wait() { h.bg.Wait() }

// WaitContext is Wait bounded by ctx, for shutdown: it returns ctx's error
// if background work is still running when ctx ends.
func (h *Handler) WaitContext(ctx context.Context) error { return h.bg.WaitContext(ctx) }

// Buffered returns the bytes currently charged to the buffer budget.
func (h *Handler) Buffered() int64 { return h.buffered.Load() }

// ServeHTTP implements http.Handler for a request no front resolved
// (ServeInbound with the zero Inbound).
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) { h.serve(w, r) }

// serve answers r, whose Inbound (if any) its context carries.
func (h *Handler) serve(w http.ResponseWriter, r *http.Request) {
	start := h.now()
	if len(r.RequestURI) > h.cfg.MaxURLBytes {
		h.reject(w, r, http.StatusRequestURITooLong, "url_too_long", "request target too long")
		return
	}
	if !queryIsPrintable(r.URL.RawQuery) {
		// HTTP/2 and HTTP/3 carry the target in :path, where Go's URL
		// parser takes a space in the query; forwarded as it is, the
		// origin's HTTP/1.1 request line had four words (a review's
		// TestH2PathWithSpaceIsRefused). HTTP/1.1 clients cannot send it.
		// A '#' no request target may hold (RFC 9112 §3.2) stays in Go's
		// RawQuery, where the key rule read "?utm_source=x#&id=2" as id 2
		// and an origin that cuts the fragment answered for no id: stored
		// as product 2 for everyone (a review's
		// TestS24FragmentInQueryPoisonsAKeyedPage).
		h.reject(w, r, http.StatusBadRequest, "bad_target", "request target has a space, control byte or '#' in its query")
		return
	}
	if r.URL.Path == "" {
		// An absolute-form target without a path ("GET http://shop.test
		// HTTP/1.1") is the root page (RFC 9112 §3.2.2): the key and the
		// origin's request already read it as "/", and the rules must
		// too, or it escaped every rule a path starts with (a bypass, a
		// set request field) and filled "/" for everyone (a review's
		// TestS24AbsoluteFormWithoutPathPoisonsTheHomePage).
		r.URL.Path, r.URL.RawPath = "/", ""
	}
	if r.Method == http.MethodConnect {
		// A reverse proxy tunnels nothing: forwarded, a CONNECT (or an
		// HTTP/2 or HTTP/3 extended CONNECT, a WebSocket, with its
		// :protocol lost) reached the origin as a request of a method it
		// does not serve, and its answer went back as a 200 the client took
		// for an open tunnel (a review's). 501: this server does not do
		// it for any resource (RFC 9110 §15.6.2).
		h.reject(w, r, http.StatusNotImplemented, "connect", "CONNECT is not supported: edge is a reverse proxy and opens no tunnels")
		return
	}
	if r.Method == http.MethodTrace {
		// TRACE echoes the request back, cookies and credentials
		// included, which cross-site tracing reads through a page; CDNs
		// and nginx refuse it, and no browser feature needs it.
		w.Header().Set("Allow", "GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS")
		h.reject(w, r, http.StatusMethodNotAllowed, "trace", "TRACE is not allowed")
		return
	}
	// A request an authenticated peer relays is no client's: the ingress
	// held its client to the bound, and the peer's address stands for
	// every client it serves (all of a cluster's nodes, when they share an
	// IPv6 /64), so bounding it would turn a busy peer's misses into 429s
	// and origin fetches.
	//
	// Counted with the bound off too, so that a bound a reload turns on
	// sees the requests under way (a review: a flooding client kept every
	// request it had plus N new ones). The hit path (AppendHit) counts
	// only while the bound is on: its hits last microseconds, and the
	// count's lock on every hit is what that path exists to avoid.
	if !inboundOf(r).Relayed {
		client := clientaddr.OfRemote(r.RemoteAddr)
		if !h.clients.acquire(client) {
			w.Header().Set("Retry-After", "1")
			h.reject(w, r, http.StatusTooManyRequests, "client_limit", "too many requests in flight from this client")
			return
		}
		defer h.releaseClientOf(r, client)()
	}
	if r.ContentLength > h.cfg.MaxBodyBytes {
		h.reject(w, r, http.StatusRequestEntityTooLarge, "body_too_large", "request body too large")
		return
	}
	if r.Body != nil && r.Body != http.NoBody {
		// A request of the handler's own, whose Body it may replace:
		// net/http decides after the answer whether the connection may
		// carry another request by reading the body of the *Request it
		// handed over (was it closed early, is its rest too large to
		// discard). Behind a replaced Body it could not tell; after an
		// origin's early answer it went on to parse the rest of the
		// upload as the next request (a 400 to the client's next request
		// on that connection, or a request smuggled in the body). The
		// node's withBodyDeadline keeps its own copy for the same reason;
		// this one holds for the handler anywhere it is mounted.
		r = r.WithContext(r.Context())
		r.Body = h.guardBody(w, r.Body)
		if sb, ok := r.Body.(*slowBody); ok && r.ProtoMajor == 1 {
			w = &headerHook{ResponseWriter: w, hook: closeIfDropped(sb)}
		}
	}
	h.metrics.InFlight.Inc()
	defer h.metrics.InFlight.Dec()
	g := rulingOf(r) // before anything reads or changes the request's fields
	bypass := applyRequestRule(r, g, h.sanitize)
	if g != nil && g.set.BrowserTTLs() && !bypass && !inboundOf(r).Relayed && (r.Method == http.MethodGet || r.Method == http.MethodHead) {
		// A client's answer: a peer's keeps the origin's field.
		w = &headerHook{ResponseWriter: w, hook: h.browserTTLHook(g, len(r.Header["Cookie"]) > 0 || len(r.Header["Authorization"]) > 0)}
	}

	var result string
	switch r.Method {
	case http.MethodGet, http.MethodHead:
		dropUnreadBody(r) // the cache never forwards a GET's body
		if bypass {
			why := whyRule
			if g.requestRule().IsAmbiguousPath() {
				// Not a rule the operator wrote: say why the path passed
				// (an operator's walk-through found "detail=rule" with no
				// such rule in the config).
				why = whyAmbiguousPath
			}
			result = h.servePass(w, r, why)
			break
		}
		result = h.serveCacheable(w, r)
	default:
		result = h.servePass(w, r, whyMethod)
	}
	h.metrics.observe(result, h.now().Sub(start).Seconds())
	if in := inboundOf(r); !in.Relayed {
		// A site's counts, and its rules', are its clients' requests, as
		// edge_site_requests_total's: a peer's climb is the same client
		// request counted again at another node.
		h.countRule(g, result)
		in.Site.count(result)
	}
}

// queryIsPrintable reports whether a raw query holds no space, control
// byte, DEL or '#': what an HTTP/1.1 request line's query can carry.
func queryIsPrintable(q string) bool {
	for i := 0; i < len(q); i++ {
		if c := q[i]; c <= ' ' || c == 0x7f || c == '#' {
			return false
		}
	}
	return true
}

func (h *Handler) reject(w http.ResponseWriter, r *http.Request, code int, reason, msg string) {
	h.metrics.countOnly(h.refuse(w, r, code, reason, msg))
}

// refuse is reject on a path whose caller counts the result it returns
// (ResultRejected), so that the request is counted once (a review found
// refused uploads counted twice).
func (h *Handler) refuse(w http.ResponseWriter, r *http.Request, code int, reason, msg string) string {
	dropUnreadBody(r) // a refused upload is not read at the client's pace
	h.metrics.Rejected.WithLabelValues(reason).Inc()
	h.writeError(w, code, refused("request", reason), msg)
	return ResultRejected
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
	if reqCC.MaxStale != unset {
		if -remaining > seconds(reqCC.MaxStale) {
			// The client's bound (RFC 9111 §5.2.1.2: stale by no more
			// than that) holds for the origin's stale-while-revalidate
			// window too (a review's
			// TestS63StaleWhileRevalidateIgnoresTheClientsMaxStaleBound).
			return useValidate
		}
		if e.lifetime > 0 {
			return useStale
		}
		// A copy that was never fresh (max-age=0, a past Expires: kept
		// only to be validated) is not served on a client's word, as it
		// never is on an error (staleOnErrorOK): it may be the answer to
		// another user's cookie, which the origin let be stored because
		// it validates every use (a review's
		// TestS63MaxStaleHandsOutAnotherUsersNeverFreshPage). Only the
		// origin's own stale-while-revalidate, below, reuses it.
	}
	if e.cc.StaleWhile != unset && -remaining <= h.policy().staleWindow(e.cc.StaleWhile, 0) {
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
	key := h.requestKey(r)
	h.hot.observe(key)
	q := queryOf(r, h.now())
	hasAuth := q.hasAuth

	// Read before the lookup: a fill this request leads or joins, or its
	// background refresh, validates what the lookup found and must not
	// store it, nor hand it to later requests, if a purge came since
	// (miss.purgesAt).
	purgesAt := h.purges.Load()
	g := rulingOf(r)
	e, vary := h.store.LookupFunc(key, func(names []string) string { return h.varyKey(names, r) }, g.lifetime, g.lifetimeShared())
	if e != nil && e.fromDisk {
		// A disk hit's body is in memory while it is written: it is
		// charged to the buffer budget for that long, so that slow
		// readers of many disk hits cannot hold more than the budget.
		if !h.charge(e.size) {
			w.Header().Set("Retry-After", "1")
			h.writeError(w, http.StatusServiceUnavailable, refused("miss", string(whyBufferFull)), "too much in flight")
			return ResultRejected
		}
		defer h.release(e.size)
	}
	q.cc = h.clientDirectives(q.cc, rulingOf(r), e, q.now)
	reqCC := q.cc
	switch d := h.decideHit(e, q); {
	case d.pass != "":
		return h.servePass(w, r, d.pass)
	case d.answers():
		h.writeEntry(w, r, e, q.now, d.status(), nil)
		// A peer's probe (only-if-cached, with a route) does not refresh:
		// its route may not fetch (the cluster refuses it), so such a
		// refresh only ever failed, and a client joining its fill got
		// the failure (a review).
		if d.refresh() && (!reqCC.OnlyIfCached || inboundOf(r).Route == nil) {
			h.refreshInBackground(r, key, e, reqCC, hasAuth, purgesAt)
		}
		return d.result()
	}
	if reqCC.OnlyIfCached {
		h.writeError(w, http.StatusGatewayTimeout, refused("miss", "only-if-cached"), "not in cache")
		return ResultOnlyIfCached
	}
	m := h.missFor(key, r, purgesAt)
	if e == nil {
		if h.remembered(h.large, m) {
			// Known to be larger than we store: forward as is, Range included.
			return h.servePass(w, r, whyTooLarge)
		}
		if h.remembered(h.passes, m) {
			return h.servePass(w, r, whyUncacheable)
		}
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
	m.vary, m.stale, m.reqCC, m.hasAuth, m.fwd = vary, e, reqCC, hasAuth, fwd
	if e == nil && h.cfg.SliceBytes > 0 && len(r.Header["Range"]) == 1 && r.Method == http.MethodGet && !m.keyed {
		if result, ok := h.probeSliced(w, r, m); ok {
			return result
		}
	}
	return h.fetchAndServe(w, r, m)
}

// missFor starts the miss of r under key with what the request itself
// decides: its keyed fields (computed once), its Cookie, and from them the
// passKey.
func (h *Handler) missFor(key string, r *http.Request, purgesAt uint64) miss {
	g := rulingOf(r)
	// The request's own fields in its key: those the cache does not know
	// (fieldKey) and those a key rule adds. Either makes the request's
	// answer a variant of its own: never sliced (slices are shared by
	// URL), and remembered apart in the hit-for-pass memories.
	fk := h.fieldKey(r.Header, g.uniformEdits()) + g.editKey() + g.keyExtra(r.Header)
	m := miss{key: key, passKey: key + fk, keyed: fk != "", hasCookie: len(r.Header["Cookie"]) > 0, ruling: g, purgesAt: purgesAt}
	if m.hasCookie {
		m.passKey += "\x00cookie"
	}
	if kr := g.keyRule(); kr != nil && !kr.Query.Empty() && r.URL.RawQuery != "" && len(kr.KeyQuery(r.URL.RawQuery)) < len(r.URL.RawQuery) {
		// The key rule dropped parameters the origin saw: an answer that
		// may not be stored may be about them (a campaign parameter's
		// attribution cookie), not the URL, and remembered under the
		// shared key it made the page hit-for-pass for everyone (a
		// review's TestS24IgnoredParamAnswerDoesNotTurnTheCacheOffForEveryone).
		m.ownQuery, m.urlPassKey = true, m.passKey
		m.passKey += "\x00query " + r.URL.RawQuery
	}
	m.passKey, m.urlPassKey = memoryKey(m.passKey), memoryKey(m.urlPassKey)
	return m
}

// memoryKeyMax is the longest key the hit-for-pass and too-large
// memories hold as it is.
const memoryKeyMax = 512

// memoryKey is k as those memories hold it: itself up to memoryKeyMax
// bytes, else a digest. A pass key spells out the names of the request's
// keyed fields and, past a key rule, its query: 10,000 of them with a
// header-sized name each were hundreds of MiB no budget counted (a
// review's TestS71HitForPassMemoryBytesAreBounded).
func memoryKey(k string) string {
	if len(k) <= memoryKeyMax {
		return k
	}
	sum := sha256.Sum256([]byte(k))
	return "\x00digest " + hex.EncodeToString(sum[:16])
}

// remembered reports whether memory holds m's pass key, or, for a request
// whose query the key rule trimmed, the key of the URL it shares: a page
// known uncacheable for everyone is passed for a campaign click too, not
// fetched as a miss that waits on another visitor's fill (a review's
// TestS25IgnoredParamRequestsCollapseOnAHitForPassPage).
func (h *Handler) remembered(memory *expirable.LRU[string, struct{}], m miss) bool {
	if _, ok := memory.Get(m.passKey); ok {
		return true
	}
	_, ok := memory.Get(m.urlPassKey)
	return ok && m.ownQuery
}

// coalesceKey names one variant of a URL for request merging.
func coalesceKey(key, varyKey string) string {
	if varyKey == "" {
		return key
	}
	return key + "\x00" + varyKey
}

// clientLimiter bounds concurrent requests per client (clientaddr.OfRemote:
// an IPv4 address, an IPv6 /64).
type clientLimiter struct {
	limit atomic.Int64 // 0: off (serve still takes a slot; AppendHit then only for a body written at the client's pace)
	mu    sync.Mutex
	n     map[string]int
	left  map[string]int // fills requests led and left, body still coming (chargeClientFor)
}

// on reports whether requests are bounded per client (AppendHit counts
// small hits only then; serve counts every request).
func (c *clientLimiter) on() bool { return c.limit.Load() > 0 }

// acquire takes a slot for ip, counted whatever the limit (a reload may
// turn it off between on and here, and release must find the slot).
func (c *clientLimiter) acquire(ip string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if limit := c.limit.Load(); limit > 0 && int64(c.n[ip]) >= limit {
		return false
	}
	addCount(&c.n, ip, 1)
	return true
}

// addCount adds d to m's count of ip, the entry going at 0. The caller
// holds the limiter's lock.
func addCount(m *map[string]int, ip string, d int) {
	if *m == nil {
		*m = make(map[string]int)
	}
	if n := (*m)[ip] + d; n > 0 {
		(*m)[ip] = n
	} else {
		delete(*m, ip)
	}
}

// releaseClientOf returns what gives back r's count for client when r
// ends. While the bound is on, a request whose client goes away before it
// ends (a leader waiting for a silent origin's head, which goes on for the
// requests joining it) stops counting as the client's request from then
// and counts as a fill it left (leave: only against new fetches): a review
// found a client that gave up on a silent origin's page refused 429 on
// its hits until origin.response_timeout, everyone behind its address with
// it.
func (h *Handler) releaseClientOf(r *http.Request, client string) func() {
	if !h.clients.on() {
		return func() { h.clients.release(client) }
	}
	left := make(chan struct{})
	stop := context.AfterFunc(r.Context(), func() {
		defer close(left)
		h.clients.release(client)
		h.clients.leave(client)
	})
	return func() {
		if stop() {
			h.clients.release(client)
			return
		}
		<-left // it ran, or is running: its count goes once it has been taken
		h.clients.ended(client)
	}
}

// leave counts a fill ip's request led and left while its body is still
// coming (chargeClientFor); ended gives it back.
func (c *clientLimiter) leave(ip string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	addCount(&c.left, ip, 1)
}

func (c *clientLimiter) ended(ip string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	addCount(&c.left, ip, -1)
}

// mayLead reports whether ip may start another upstream fetch: the fills
// its requests left, body still coming, are within the bound too (they
// have an allowance of their own, the bound again: a client that asks HEAD
// then GET, as download managers and link checkers do, is not refused for
// the body its HEAD's fill still fetches). So a client holds at most about
// twice its bound of upstream slots, never the node's. A hit or a request
// joining a fill under way needs no such check: only a fetch of its own
// costs the origin and a slot.
func (c *clientLimiter) mayLead(ip string) bool {
	limit := c.limit.Load()
	if limit <= 0 {
		return true
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return int64(c.left[ip]) <= limit
}

func (c *clientLimiter) release(ip string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	addCount(&c.n, ip, -1)
}

// UpstreamInfo says where a request's response came from and how long the
// upstream took, for the access log. The front hands one to ServeInbound;
// the proxy fills it from what the fetcher's Result says.
type UpstreamInfo struct {
	from    atomic.Pointer[string]
	addr    atomic.Pointer[string]
	dur     atomic.Int64
	retries atomic.Int64
}

// Addr is the upstream that answered ("" if unknown).
func (u *UpstreamInfo) Addr() string {
	if p := u.addr.Load(); p != nil {
		return *p
	}
	return ""
}

// Retries is the number of upstreams tried before the one that answered,
// summed over the request's upstream fetches.
func (u *UpstreamInfo) Retries() int { return int(u.retries.Load()) }

// SetFrom names the upstream (origin, peer).
func (u *UpstreamInfo) SetFrom(s string) {
	if u != nil {
		u.from.Store(&s)
	}
}

// From names the upstream, "" if the request did not go upstream.
func (u *UpstreamInfo) From() string {
	if p := u.from.Load(); p != nil {
		return *p
	}
	return ""
}

// Duration is the time to the upstream's response headers.
func (u *UpstreamInfo) Duration() time.Duration { return time.Duration(u.dur.Load()) }
