package proxy

import (
	"bytes"
	"net"
	"net/http"
	"strconv"
	"sync"

	"github.com/edgecache/edge/internal/clientaddr"
	"github.com/edgecache/edge/rules"
)

// HitRequest is a plain GET or HEAD read by the plain listener's own
// HTTP/1.1 loop (package hitpath). That loop hands a request here only
// when nothing in it can change how ServeHTTP would answer a fresh hit: no
// body, Range, conditionals, Authorization, Cache-Control, Pragma, Expect,
// Upgrade, X-Forwarded-Proto or Connection option other than keep-alive and
// close, one Host, and a request target made of characters that net/url
// keeps as sent.
type HitRequest struct {
	Head     bool
	Host     string
	Path     string   // the request target's path, as sent
	RawQuery string   // what follows the first '?', as sent
	Accept   []string // the Accept-Encoding field values, nil when absent
	Remote   net.Addr // the client, for limits.max_inflight_per_client (nil: a peer's request, not bounded)
	Close    bool     // the client sent Connection: close
	Site     *Site    // the site the front resolved Host to (nil: look it up)
	TLS      bool     // the connection is TLS: the key's scheme is https
	// Front holds the fields the listener's front adds to every response
	// (the TLS front's Alt-Svc and Strict-Transport-Security); nil: none.
	Front *FrontFields
	// Dropped and Forwarding count the request's field names the cache
	// never forwards and its forwarding fields (hitpath.Request's), for
	// edge_request_fields_total as sanitize counts them.
	Dropped, Forwarding int
}

// FrontFields are response fields a front adds to every answer before
// the proxy writes it, serialised once. As on ServeHTTP's path, a stored
// response's own field of the same name replaces the front's: AppendHit
// leaves such entries to ServeHTTP.
type FrontFields struct {
	names []string
	block []byte // "Name: value\r\n" lines
}

// NewFrontFields serialises h (net/http's own serialiser, as for the
// entry's fields).
func NewFrontFields(h http.Header) *FrontFields {
	f := &FrontFields{}
	for name := range h {
		f.names = append(f.names, http.CanonicalHeaderKey(name))
	}
	var buf bytes.Buffer
	_ = h.Write(&buf)
	f.block = buf.Bytes()
	return f
}

// replacedBy reports whether e carries one of the fields itself.
func (f *FrontFields) replacedBy(e *Entry) bool {
	for _, name := range f.names {
		if _, ok := e.Header[name]; ok {
			return true
		}
	}
	return false
}

// noDirectives is what a request without Cache-Control or Pragma asks.
var noDirectives = ParseCacheControl(nil, "Cache-Control")

// hitBlock is an entry's response head as net/http would write it for a
// fresh hit, serialised once: the header fields without Age, Date (when the
// entry has none) and Connection, which change per response.
type hitBlock struct {
	statusLine []byte // "HTTP/1.1 200 OK\r\n"
	fields     []byte // sorted "Name: value\r\n" lines
	// peerFields are fields with the entry's Edge- targeted fields, for a
	// peer's hit (nil: the same as fields; see isEdgeField).
	peerFields []byte
	addDate    bool // the entry has no Date: the response gets the current one
	usable     bool // false: the entry is one this path does not write (see hitBlockOf)
}

// HitAnswer is AppendHit's response.
type HitAnswer struct {
	Head   []byte // status line and fields, and a body of at most copyBodyBytes
	Body   []byte // a larger body, the stored bytes themselves (nil: in Head, or HEAD)
	Status int
	// BodyBytes is the body's length as sent (0 for HEAD).
	BodyBytes int64
	// Pinned and ClientIP are what the answer holds until ReleaseHit: the
	// stored entry whose body is being written (nil: none), and the
	// client's limits.max_inflight_per_client slot ("": none).
	Pinned   *Entry
	ClientIP string
}

// copyBodyBytes is the largest body AppendHit copies into the head's
// buffer (one plain write, no hold on the entry). Larger ones are written
// from the entry, as ServeHTTP writes them: a client that stops reading
// then holds no copy.
const copyBodyBytes = 4 << 10

// ReleaseHit ends what an answer held: call it once for every answer,
// when its writes are done. The request counts as in flight until then;
// an entry evicted while its body is sent stays charged to the buffer
// budget, and the client's in-flight slot is held as long, as on
// ServeHTTP's path.
func (h *Handler) ReleaseHit(pinned *Entry, clientIP string) {
	h.metrics.InFlight.Dec()
	if pinned != nil {
		h.unpin(pinned)
	}
	if clientIP != "" {
		h.clients.release(clientIP)
	}
}

// AppendHit answers req when it is a fresh hit of a stored entry in RAM
// that ServeHTTP would write with the same fields and body, and counts it
// as ServeHTTP counts a hit: a's Head is dst with the response head (and a
// small body) appended, and a's Body the rest. Otherwise it returns false
// with nothing counted: the request must go through ServeHTTP. date is the
// current "Date: …\r\n" line.
//
// It declines, besides everything ServeHTTP would not answer with a fresh
// hit: disk-resident entries (their reads are charged to the buffer
// budget), entries of URLs with Vary (the variant depends on fields this
// path does not keep), sliced objects, forms made per response, and
// statuses without a body or a standard reason phrase.
func (h *Handler) AppendHit(dst []byte, req *HitRequest, date []byte, a *HitAnswer) bool {
	start := h.now()
	if len(req.Path)+1+len(req.RawQuery) > h.cfg.MaxURLBytes || req.Path == "" || req.Path[0] != '/' || !queryIsPrintable(req.RawQuery) {
		return false // serve refuses it, or reads it another way
	}
	var rule, keyRule *rules.Rule
	var key string
	if req.Site != nil && req.Site.Rules != nil {
		if req.Site.Rules.NeedsHeader() {
			return false // a rule matches on a cookie, which this path does not read
		}
		// As ServeHTTP: the key comes from the key rule (a GET's, without
		// cookie conditions), bypass and the counts from the request's
		// rule, which may match HEAD alone.
		keyRule = req.Site.Rules.ForKey(req.Path, req.RawQuery)
		rule = keyRule
		if req.Head {
			rule = req.Site.Rules.ForRequest(http.MethodHead, req.Path, nil)
		}
		// The key rule's bypass too: ServeHTTP passes a request whose key
		// rule is the ambiguous-path bypass whatever the request's own
		// (HEAD) rule says (a review's test).
		if rule != nil && rule.Bypass || keyRule != nil && (keyRule.Bypass || keyRule.KeyedOnRequest()) {
			return false
		}
		// Request edits that not every request of the key is sent (a HEAD
		// under a rule of its own ahead of a GET rule that sets an origin
		// token) key the request in ServeHTTP (editKey); the plain variant
		// here may be another rule's fill (a review's poisoning:
		// node/review_s52_rules_test.go).
		if editsApart(req.Site.Rules, rule, keyRule, req.Path) {
			return false
		}
		if rule != nil {
			// Credentials or a cookie a rule adds make ServeHTTP judge
			// the entry as a personal request's (authAllowsShared); this
			// path reads the client's fields only (a review's
			// TestS72RuleSetAuthorizationHitPathServesWhatServeHTTPPasses).
			if _, ok := rule.Request.Value("Authorization"); ok {
				return false
			}
			if _, ok := rule.Request.Value("Cookie"); ok {
				return false
			}
		}
	}
	// The scheme as ServeHTTP reads it (Handler.scheme); a client's
	// X-Forwarded-Proto never reaches this path (hitpath declines it).
	proto, _ := ruleProto(rule)
	scheme := schemeOf(req.TLS, proto)
	// The key is built in a buffer this path reuses and read through a
	// view of it: the store's look-up keeps no reference, and the hot-key
	// sample copies what it keeps. A hit then allocates nothing (fewer
	// collections, a shorter tail).
	kb := keyBufs.Get().(*[]byte)
	defer keyBufs.Put(kb)
	if req.Site != nil {
		*kb = h.appendKeyUnder((*kb)[:0], req.Site, keyRule, scheme, req.Host, req.Path, h.keyQuery(req.RawQuery))
	} else {
		*kb = h.appendKey((*kb)[:0], scheme, req.Host, req.Path, h.keyQuery(req.RawQuery))
	}
	key = keyString(*kb)
	e := h.store.lookupPlain(key)
	q := hitQuery{cc: noDirectives, accept: req.Accept, now: start}
	hd := h.decideHit(e, q)
	if !hd.plainHit(e, q) || (req.Front != nil && req.Front.replacedBy(e)) {
		return false
	}
	// A client's answer whose Cache-Control a browser_ttl rewrites is
	// ServeHTTP's (browserTTLHook); the hit block is the stored field,
	// which a peer is sent as it is. A HEAD's answer is the GET's
	// (ruling.response).
	if req.Remote != nil && req.Site != nil && req.Site.Rules.BrowserTTLMayApply(http.MethodGet, req.Path, e.Status) {
		return false
	}
	d, ok := h.madeForm(e, hd.enc, hd.transcode)
	if !ok {
		return false // ServeHTTP makes the form, charged to the buffer budget
	}
	b := h.hitBlockOf(d)
	if !b.usable {
		return false
	}
	if req.Remote != nil && scheme != "https" && len(d.Header[hsts]) > 0 {
		return false // ServeHTTP leaves it out for a plain client (plainClient)
	}
	var ip string
	if req.Remote != nil && (h.clients.on() || (len(d.Body) > copyBodyBytes && !req.Head)) {
		// Held until ReleaseHit, after the write (OfRemote's key is never
		// "", which there means none held). A hit whose body is written
		// from the entry, at the client's pace, is counted with the bound
		// off too, as serve counts every request, so that a bound a
		// reload turns on sees it (a review held one of 16 MiB unread);
		// one copied into its head is written at once, and the count's
		// lock would cost every small hit.
		ip = clientaddr.OfRemote(req.Remote.String()) // the key ServeHTTP's bound uses
		if !h.clients.acquire(ip) {
			return false
		}
	}
	dst = append(dst, b.statusLine...)
	if req.Remote == nil && b.peerFields != nil {
		dst = append(dst, b.peerFields...)
	} else {
		dst = append(dst, b.fields...)
	}
	if req.Front != nil {
		dst = append(dst, req.Front.block...)
	}
	dst = append(dst, "Age: "...)
	dst = append(dst, ageValue(d.Age(start))[0]...)
	dst = append(dst, "\r\n"...)
	if b.addDate {
		dst = append(dst, date...)
	}
	if req.Close {
		dst = append(dst, "Connection: close\r\n"...)
	}
	dst = append(dst, "\r\n"...)
	h.metrics.InFlight.Inc() // until ReleaseHit
	*a = HitAnswer{Status: d.Status, ClientIP: ip}
	switch {
	case req.Head:
	case len(d.Body) <= copyBodyBytes:
		dst = append(dst, d.Body...)
		a.BodyBytes = int64(len(d.Body))
	default:
		// Written from the entry itself, which is pinned meanwhile, as
		// writeEntry pins it.
		e.users.Add(1)
		a.Body, a.BodyBytes, a.Pinned = d.Body, int64(len(d.Body)), e
	}
	a.Head = dst
	if e.offers != 0 {
		h.metrics.compression.served[d.coding].Inc()
	}
	h.hot.observe(key)
	h.metrics.observe(ResultHit, h.now().Sub(start).Seconds())
	if req.Remote != nil { // a client's, not a peer's (ServeHTTP's rule)
		h.countHitFields(req)
		req.Site.count(ResultHit)
		if rule != nil {
			h.metrics.rules.hit(req.Site.Name, req.Site.Rules, rule)
		}
	}
	return true
}

// countHitFields counts a client's hit's dropped and replaced fields as
// sanitize counts those of a request ServeHTTP answers, so that
// edge_request_fields_total does not depend on which path answered.
func (h *Handler) countHitFields(req *HitRequest) {
	if req.Dropped > 0 {
		h.metrics.fieldDropped.Add(float64(req.Dropped))
	}
	if req.Forwarding > 0 && !clientaddr.In(req.Remote.String(), h.cfg.TrustedProxies) {
		h.metrics.fieldReplaced.Add(float64(req.Forwarding))
	}
}

// keyBufs are AppendHit's key buffers.
var keyBufs = sync.Pool{New: func() any { b := make([]byte, 0, 256); return &b }}

// hitBlockOf returns e's response head, made on first use. An entry is
// immutable once stored (its soft-purge flag is checked per request), so
// the block never goes out of date.
func (h *Handler) hitBlockOf(e *Entry) *hitBlock {
	if b := e.hit1.Load(); b != nil {
		return b
	}
	b := &hitBlock{}
	text := http.StatusText(e.Status)
	cl := e.Header["Content-Length"]
	// net/http writes what setEntryHeader sets; where it would add or
	// change something itself (a missing or wrong length, a status with
	// no body or no standard text), this path steps aside.
	b.usable = text != "" && e.Status >= 200 && e.Status != http.StatusNoContent && e.Status != http.StatusNotModified &&
		len(cl) == 1 && cl[0] == strconv.Itoa(len(e.Body))
	if b.usable {
		hdr := make(http.Header, len(e.Header)+2)
		for k, v := range e.Header {
			hdr[k] = v
		}
		delete(hdr, "Age")
		hdr["Cache-Status"] = h.hitStatus
		hdr["Via"] = h.viaFor(e)
		_, hasDate := hdr["Date"]
		b.addDate = !hasDate
		var buf bytes.Buffer
		_ = hdr.Write(&buf) // net/http's own serialiser: sorted, values cleaned as it cleans them
		b.fields = buf.Bytes()
		n := len(hdr)
		if h.dropEdgeTargeted(hdr); len(hdr) != n {
			b.peerFields = b.fields
			var client bytes.Buffer
			_ = hdr.Write(&client)
			b.fields = client.Bytes()
		}
		b.statusLine = []byte("HTTP/1.1 " + strconv.Itoa(e.Status) + " " + text + "\r\n")
	}
	e.hit1.CompareAndSwap(nil, b)
	return e.hit1.Load()
}

// lookupPlain returns the entry of key that answers a request with no
// Vary-selected or keyed fields: the URL's variant with an empty variant
// key when the URL has no Vary, in RAM; otherwise nil (ask LookupFunc).
// Variants made for requests with keyed fields (proxy.fieldKey) sit beside
// it and are never it.
func (s *Store) lookupPlain(key string) *Entry {
	s.mu.Lock()
	defer s.mu.Unlock()
	o, ok := s.lru.Get(key)
	if !ok || len(o.vary) != 0 {
		return nil
	}
	for _, e := range o.variants {
		if e.VaryKey == "" {
			return e
		}
	}
	return nil
}

// HitStatus is the Cache-Status of a fresh hit from this node.
func (h *Handler) HitStatus() string { return h.hitStatus[0] }

// ForwardedQuery is a query as the cache forwards and logs it (sorted
// with cache.sort_query).
func (h *Handler) ForwardedQuery(q string) string { return h.keyQuery(q) }
