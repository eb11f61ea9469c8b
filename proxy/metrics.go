package proxy

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/edgecache/edge/coding"
)

// Result labels of edge_requests_total. The set is fixed so that the label
// stays bounded.
const (
	ResultHit          = "hit"            // fresh response from the local store
	ResultStale        = "stale"          // stale response allowed by max-stale or stale-while-revalidate
	ResultStaleError   = "stale_error"    // stale response because the origin failed (stale-if-error)
	ResultRevalidated  = "revalidated"    // stored response validated by a 304
	ResultMiss         = "miss"           // fetched (and stored if allowed)
	ResultCollapsed    = "collapsed"      // answered by another request's fetch
	ResultPass         = "pass"           // not cacheable: method, hit-for-pass, Authorization
	ResultOnlyIfCached = "only_if_cached" // 504 for an only-if-cached miss
	ResultError        = "error"          // the origin failed and nothing stale could be served
	ResultRejected     = "rejected"       // refused by a limit
)

// resultNames are every result label, in one order: the collectors made
// up front and Site's per-result counts.
var resultNames = [...]string{ResultHit, ResultStale, ResultStaleError, ResultRevalidated, ResultMiss, ResultCollapsed,
	ResultPass, ResultOnlyIfCached, ResultError, ResultRejected}

// Metrics are the data path's Prometheus collectors.
type Metrics struct {
	Requests        *prometheus.CounterVec   // requests by result
	RequestDuration *prometheus.HistogramVec // client-facing latency by result
	OriginRequests  *prometheus.CounterVec   // upstream fetches by outcome (2xx…5xx, error)
	OriginDuration  prometheus.Histogram     // time to upstream response headers
	Coalesced       prometheus.Counter       // requests merged into another request's fetch
	FillsKeptApart  prometheus.Counter       // peers' climbs that fetched apart rather than wait on a fill that may wait on them
	Rejected        *prometheus.CounterVec   // requests refused by a limit, by reason
	NotStored       *prometheus.CounterVec   // fetched responses not stored, by reason
	Purged          *prometheus.CounterVec   // entries purged, by kind (hard, soft)
	Invalidations   prometheus.Counter       // entries removed by unsafe methods
	InFlight        prometheus.Gauge         // client requests being served
	Refreshes       *prometheus.CounterVec   // background revalidations by outcome
	SliceFetches    *prometheus.CounterVec   // slices of large objects fetched, by source (stream, range)
	SlicedResponses prometheus.Counter       // responses served from sliced objects
	SliceFailures   *prometheus.CounterVec   // sliced objects given up, by reason
	// RequestFields counts client request fields the cache did not
	// forward as sent, by action: dropped (underscore names, method
	// overrides, rewrites), replaced (an untrusted client's forwarding
	// fields) and keyed (a field the cache does not know, forwarded and
	// made part of the key).
	RequestFields *prometheus.CounterVec

	fieldDropped, fieldReplaced, fieldKeyed prometheus.Counter // RequestFields' children

	buffered func() float64 // bytes charged to the buffer budget; set by the handler

	compression compressionMetrics
	spool       spoolMetrics
	// requestBodies counts request bodies by how they went upstream
	// (upload.go).
	requestBodies map[string]prometheus.Counter

	rules ruleMetrics
	// earlyHints counts the origin's 103 answers by outcome
	// (earlyhints.go), edge_early_hints_total's children.
	earlyHints map[string]prometheus.Counter
	// browserTTL counts client answers a rule's browser_ttl named, by
	// outcome (browserttl.go), edge_browser_ttl_answers_total's children.
	browserTTL map[string]prometheus.Counter
	// clientNoCacheServed counts requests whose no-cache, max-age or
	// min-fresh was not obeyed (cache.client_no_cache, a rule's).
	clientNoCacheServed prometheus.Counter

	// Children of Requests and RequestDuration per result, resolved once so
	// the hit path does not hash label values.
	byResult map[string]resultMetrics
}

type resultMetrics struct {
	count   prometheus.Counter
	latency prometheus.Observer
	total   *atomic.Uint64 // the same count, for the status page's snapshot
}

// observe counts one request with its result and latency.
func (m *Metrics) observe(result string, seconds float64) {
	rm := m.byResult[result] // every result label is created in NewMetrics
	rm.count.Inc()
	rm.total.Add(1)
	rm.latency.Observe(seconds)
}

// countOnly counts a request that has no latency worth observing (refused
// by a limit before any work).
func (m *Metrics) countOnly(result string) {
	rm := m.byResult[result]
	rm.count.Inc()
	rm.total.Add(1)
}

// Stats is a snapshot of the data path's counters for the status page.
type Stats struct {
	Requests      map[string]uint64 // client requests by result label
	BufferedBytes int64             // bytes charged to the buffer budget
	Coalesced     float64           // requests answered by another request's fetch
	// FillsKeptApart: peers' climbs that fetched for themselves rather
	// than join a fill that may wait on them (waitorder.go).
	FillsKeptApart float64
	// Spool: what spill files hold now and have held (spool.go); all 0
	// with spilling off.
	SpoolBytes, SpoolBudget, SpoolFiles int64
	SpoolOpened, SpoolFull              float64
	// RequestBodies: request bodies by how they went upstream (upload.go).
	RequestBodies map[string]float64
	// Refreshes: stale-while-revalidate background refreshes by outcome
	// (refused: no upstream slot was free).
	Refreshes map[string]float64
	// EarlyHints: the origin's 103 answers relayed to their client, and
	// dropped (earlyhints.go).
	EarlyHints map[string]float64
	// BrowserTTL: client answers a rule's browser_ttl named, rewritten or
	// kept as the origin made them (personal answers; browserttl.go).
	BrowserTTL map[string]float64
}

// Stats returns the current counters.
func (h *Handler) Stats() Stats {
	s := Stats{Requests: make(map[string]uint64, len(h.metrics.byResult)), BufferedBytes: h.buffered.Load(),
		Coalesced: counterValue(h.metrics.Coalesced), FillsKeptApart: counterValue(h.metrics.FillsKeptApart)}
	if sp := h.spool; sp != nil {
		s.SpoolBytes, s.SpoolBudget, s.SpoolFiles = sp.used.Load(), sp.budget, sp.files.Load()
		s.SpoolOpened, s.SpoolFull = counterValue(h.metrics.spool.opened), counterValue(h.metrics.spool.full)
	}
	for k, rm := range h.metrics.byResult {
		s.Requests[k] = rm.total.Load()
	}
	s.Refreshes = make(map[string]float64, len(refreshOutcomes))
	for _, o := range refreshOutcomes {
		s.Refreshes[o] = counterValue(h.metrics.Refreshes.WithLabelValues(o))
	}
	s.EarlyHints = make(map[string]float64, len(h.metrics.earlyHints))
	for o, c := range h.metrics.earlyHints {
		s.EarlyHints[o] = counterValue(c)
	}
	s.BrowserTTL = make(map[string]float64, len(h.metrics.browserTTL))
	for o, c := range h.metrics.browserTTL {
		s.BrowserTTL[o] = counterValue(c)
	}
	s.RequestBodies = make(map[string]float64, len(h.metrics.requestBodies))
	for how, c := range h.metrics.requestBodies {
		s.RequestBodies[how] = counterValue(c)
	}
	return s
}

var latencyBuckets = []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}

// NewMetrics creates the collectors and registers them, with store gauges
// read from s at scrape time.
func NewMetrics(reg prometheus.Registerer, s *Store) *Metrics {
	m := &Metrics{
		Requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "edge_requests_total", Help: "Requests this node answered, by cache result: clients' and peers' (a peer's climb is counted at each node it reaches; edge_peer_requests_total counts those, edge_site_requests_total clients' alone).",
		}, []string{"result"}),
		RequestDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "edge_request_duration_seconds", Help: "Client request latency by cache result.", Buckets: latencyBuckets,
		}, []string{"result"}),
		OriginRequests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "edge_origin_requests_total", Help: "Requests sent upstream by this node's cache (to the origin alone, or through the cluster), by outcome.",
		}, []string{"outcome"}),
		OriginDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "edge_origin_request_duration_seconds", Help: "Time until upstream response headers.", Buckets: latencyBuckets,
		}),
		Coalesced: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "edge_coalesced_requests_total", Help: "Requests answered by another request's upstream fetch.",
		}),
		FillsKeptApart: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "edge_fills_kept_apart_total", Help: "Peers' climbs that fetched for themselves rather than join a fill that may be waiting on them (the wait order).",
		}),
		Rejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "edge_rejected_requests_total", Help: "Requests refused by a limit, by reason.",
		}, []string{"reason"}),
		NotStored: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "edge_not_stored_total", Help: "Fetched responses that were not stored, by reason.",
		}, []string{"reason"}),
		Purged: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "edge_purged_objects_total", Help: "Stored responses purged, by kind.",
		}, []string{"kind"}),
		Invalidations: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "edge_invalidations_total", Help: "Stored responses removed because an unsafe method changed their URL.",
		}),
		InFlight: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "edge_inflight_requests", Help: "Client requests being served.",
		}),
		Refreshes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "edge_background_refreshes_total", Help: "stale-while-revalidate background refreshes by outcome.",
		}, []string{"outcome"}),
	}
	for _, o := range refreshOutcomes {
		m.Refreshes.WithLabelValues(o) // at 0 from the start, for rate() and alerts
	}
	m.SliceFetches = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "edge_slice_fetches_total", Help: "Slices of large objects fetched upstream: from the response that revealed the object (stream) or with a Range request (range).",
	}, []string{"source"})
	m.SlicedResponses = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "edge_sliced_responses_total", Help: "Responses served from objects stored in slices.",
	})
	m.SliceFailures = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "edge_slice_failures_total", Help: "Sliced responses given up (forwarded whole, or cut), by reason: no-ranges (origin without Range support; the object is streamed from then on), changed (the object changed between slices; dropped), not-shared (a slice's answer may not be shared; the object stays), refused (the origin answered a slice with another status; the object stays), error.",
	}, []string{"reason"})
	m.RequestFields = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "edge_request_fields_total", Help: "Client request fields not forwarded as sent, by action: dropped (underscore names, method overrides, URL rewrites), replaced (an untrusted client's forwarding fields), keyed (unknown fields, forwarded and made part of the cache key).",
	}, []string{"action"})
	m.fieldDropped = m.RequestFields.WithLabelValues(fieldDropped)
	m.fieldReplaced = m.RequestFields.WithLabelValues(fieldReplaced)
	m.fieldKeyed = m.RequestFields.WithLabelValues(fieldKeyed)
	for _, s := range []string{"stream", "range"} {
		m.SliceFetches.WithLabelValues(s)
	}
	earlyHints := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "edge_early_hints_total", Help: "103 (Early Hints) answers from the origin, by outcome: relayed to the client whose request went to the origin, or dropped (an HTTP/1.0 client, a peer's request, no Link field, past two per request, or after the final answer).",
	}, []string{"outcome"})
	m.earlyHints = childrenOf(earlyHints, hintsRelayed, hintsDropped)
	browserTTL := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "edge_browser_ttl_answers_total", Help: "Client answers a cache rule's browser_ttl names, by outcome: rewritten (the Cache-Control clients were sent says max-age for browser_ttl from receipt) or kept (a private, no-store, no-cache or Set-Cookie answer, or a malformed Cache-Control, sent as the origin made it).",
	}, []string{"outcome"})
	m.browserTTL = childrenOf(browserTTL, browserTTLRewritten, browserTTLKept)
	for _, r := range []string{"no-ranges", "changed", "not-shared", "refused", "error"} {
		m.SliceFailures.WithLabelValues(r)
	}
	reg.MustRegister(m.Requests, m.RequestDuration, m.OriginRequests, m.OriginDuration, m.Coalesced, m.FillsKeptApart,
		m.Rejected, m.NotStored, m.Purged, m.Invalidations, m.InFlight, m.Refreshes,
		m.SliceFetches, m.SlicedResponses, m.SliceFailures, m.RequestFields, earlyHints, browserTTL)
	reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "edge_store_bytes", Help: "Bytes held by the store."},
			func() float64 { return float64(s.Stats().Bytes) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "edge_store_budget_bytes", Help: "The store's byte budget."},
			func() float64 { return float64(s.Budget()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "edge_store_objects", Help: "Responses (variants) held by the store."},
			func() float64 { return float64(s.Stats().Objects) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "edge_store_evictions_total", Help: "Responses evicted to stay under the byte budget."},
			func() float64 { return float64(s.Stats().Evictions) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "edge_buffered_bytes", Help: "Bytes held by fills in progress and by evicted responses still being sent (limits.max_buffered_bytes bounds it)."},
			func() float64 {
				if m.buffered == nil {
					return 0
				}
				return m.buffered()
			}),
	)
	m.compression = newCompressionMetrics(reg)
	bodies := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "edge_request_bodies_total",
		Help: "Request bodies sent upstream, by how: memory and disk (read whole before an upstream slot was taken: a slow upload holds no slot), streamed (limits.request_buffering off, or the budget or the spool could not take it whole: sent as it came, holding a slot).",
	}, []string{"how"})
	reg.MustRegister(bodies)
	m.requestBodies = map[string]prometheus.Counter{}
	for _, how := range []string{bodyInMemory, bodyOnDisk, bodyStreamed} {
		m.requestBodies[how] = bodies.WithLabelValues(how)
	}
	m.spool = newSpoolMetrics(reg)
	registerSpoolGauges(reg, m)
	m.rules = newRuleMetrics(reg)
	m.clientNoCacheServed = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "edge_client_no_cache_served_total",
		Help: "Requests with Cache-Control: no-cache or max-age (a browser's hard reload) answered from the cache without revalidation, as cache.client_no_cache or a rule says (ignore, or coalesce within its interval).",
	})
	reg.MustRegister(m.clientNoCacheServed)
	// Every refusal reason exists from the start (at 0), so that a
	// dashboard shows a flat line rather than no data on a quiet node.
	for _, reason := range []string{"url_too_long", "bad_target", "client_limit", "body_too_large", "overload", "overload_site", "too_many_ranges", "slow_body", "body_incomplete", "connect", "trace"} {
		m.Rejected.WithLabelValues(reason)
	}
	// Pre-create the bounded label values so dashboards see zeros, not gaps.
	m.byResult = make(map[string]resultMetrics)
	for _, r := range resultNames {
		m.byResult[r] = resultMetrics{m.Requests.WithLabelValues(r), m.RequestDuration.WithLabelValues(r), new(atomic.Uint64)}
	}
	return m
}

// The op label of the compression metrics: encode is the stored forms'
// work (at the stored levels), stream the encoding of responses as they
// are written (at the stream levels), decode the decoding of origin-encoded
// bodies.
const (
	opEncode = iota
	opDecode
	opStream
	opCount
)

var opNames = [opCount]string{"encode", "decode", "stream"}

// compressionMetrics count content-coding work, with every child resolved
// up front (arrays indexed by op and coding) so the data path does not hash
// label values.
type compressionMetrics struct {
	in, out, seconds [opCount][coding.Count]prometheus.Counter
	served           [coding.Count]prometheus.Counter
	larger           [coding.Count]prometheus.Counter // forms not kept: no smaller than identity
	overBudget       [2]prometheus.Counter            // by op: coding work refused by the buffer budget
	bombs, errors    prometheus.Counter
	// identityNow counts hits sent in identity while their form is made
	// (every live slot busy, or a partial request); formsDeferred the
	// forms not started because every form slot was busy.
	identityNow, formsDeferred prometheus.Counter
}

func newCompressionMetrics(reg prometheus.Registerer) compressionMetrics {
	in := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "edge_compression_input_bytes_total", Help: "Bytes fed to content-coding work, by op (encode: stored forms at the stored levels; stream: encoded as written, at the stream levels; decode) and coding.",
	}, []string{"op", "encoding"})
	out := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "edge_compression_output_bytes_total", Help: "Bytes produced by content-coding work, by op (encode, stream, decode) and coding.",
	}, []string{"op", "encoding"})
	secs := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "edge_compression_seconds_total", Help: "Time spent encoding and decoding bodies, by op (encode, stream, decode) and coding: about the CPU seconds, since coders do not wait.",
	}, []string{"op", "encoding"})
	served := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "edge_compression_responses_total", Help: "Responses that could be sent in more than one coding, by the coding sent.",
	}, []string{"encoding"})
	cm := compressionMetrics{
		bombs: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "edge_compression_bombs_total", Help: "Encoded origin bodies refused (502) because decoding them exceeded compression.max_decoded_bytes.",
		}),
		errors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "edge_compression_errors_total", Help: "Bodies that failed to encode or decode (corrupt origin data).",
		}),
		identityNow: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "edge_compression_identity_while_forming_total", Help: "Hits sent in identity while their compressed form is made in the background: every live encoder busy (CPU pressure) or a range or conditional request.",
		}),
		formsDeferred: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "edge_compression_forms_deferred_total", Help: "Stored forms not started because every form worker was busy; a later hit asks again.",
		}),
	}
	larger := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "edge_compression_larger_forms_total", Help: "Stored forms not kept because their encoding was no smaller than the identity body (identity is served), by coding.",
	}, []string{"encoding"})
	over := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "edge_compression_over_budget_total", Help: "Coding work refused because its memory (coder state, output) did not fit limits.max_buffered_bytes, by op: an encode falls back to identity, a decode answers 503.",
	}, []string{"op"})
	cm.overBudget[opEncode], cm.overBudget[opDecode] = over.WithLabelValues("encode"), over.WithLabelValues("decode")
	reg.MustRegister(in, out, secs, served, larger, over, cm.bombs, cm.errors, cm.identityNow, cm.formsDeferred)
	for op, name := range opNames {
		for e := range coding.Count {
			if (op != opDecode && (e == coding.Identity || e == coding.Deflate)) || (op == opDecode && e == coding.Identity) {
				// Never counted: leave them out of the exposition,
				// but keep the arrays total.
				cm.in[op][e], cm.out[op][e], cm.seconds[op][e] = discard{}, discard{}, discard{}
				continue
			}
			cm.in[op][e] = in.WithLabelValues(name, e.String())
			cm.out[op][e] = out.WithLabelValues(name, e.String())
			cm.seconds[op][e] = secs.WithLabelValues(name, e.String())
		}
	}
	for e := range coding.Count {
		cm.served[e] = served.WithLabelValues(e.String())
		if e == coding.Identity || e == coding.Deflate {
			cm.larger[e] = discard{}
		} else {
			cm.larger[e] = larger.WithLabelValues(e.String())
		}
	}
	return cm
}

// discard is a counter that counts nothing.
type discard struct{ prometheus.Counter }

func (discard) Inc()        {}
func (discard) Add(float64) {}

// CodingStats are the content-coding counters for the status page.
type CodingStats struct {
	Enabled     bool               `json:"enabled"`
	Responses   map[string]float64 `json:"responses_by_coding"`         // responses that could be encoded, by the coding sent
	EncodedIn   map[string]float64 `json:"encoded_input_bytes"`         // identity bytes fed to each encoder
	EncodedOut  map[string]float64 `json:"encoded_output_bytes"`        // bytes each encoder produced
	EncodeSecs  map[string]float64 `json:"encode_seconds"`              // time spent encoding
	StreamIn    map[string]float64 `json:"stream_input_bytes"`          // identity bytes encoded live (misses, forms not made yet)
	StreamOut   map[string]float64 `json:"stream_output_bytes"`         // bytes those live encodings produced
	StreamSecs  map[string]float64 `json:"stream_seconds"`              // time spent encoding live
	Deferred    float64            `json:"forms_deferred"`              // forms not started: every worker busy
	IdentityNow float64            `json:"identity_while_forming"`      // hits sent in identity while their form is made
	DecodedOut  float64            `json:"decoded_output_bytes"`        // bytes produced decoding origin-encoded bodies
	Bombs       float64            `json:"decompression_bombs_refused"` // bodies refused for decoding past the limit
	CodingError float64            `json:"coding_errors"`               // corrupt bodies
	OverBudget  map[string]float64 `json:"over_budget"`                 // coding work refused by the buffer budget, by op
	LargerForms float64            `json:"larger_forms_not_kept"`       // forms no smaller than identity
}

// CodingStats returns the content-coding counters.
func (h *Handler) CodingStats() CodingStats {
	m := &h.metrics.compression
	s := CodingStats{Enabled: h.cfg.Compression != nil, Responses: map[string]float64{},
		EncodedIn: map[string]float64{}, EncodedOut: map[string]float64{}, EncodeSecs: map[string]float64{},
		StreamIn: map[string]float64{}, StreamOut: map[string]float64{}, StreamSecs: map[string]float64{}}
	for e := range coding.Count {
		if v := counterValue(m.served[e]); v > 0 {
			s.Responses[e.String()] = v
		}
		if e == coding.Br || e == coding.Zstd || e == coding.Gzip {
			s.EncodedIn[e.String()] = counterValue(m.in[opEncode][e])
			s.EncodedOut[e.String()] = counterValue(m.out[opEncode][e])
			s.EncodeSecs[e.String()] = counterValue(m.seconds[opEncode][e])
			s.StreamIn[e.String()] = counterValue(m.in[opStream][e])
			s.StreamOut[e.String()] = counterValue(m.out[opStream][e])
			s.StreamSecs[e.String()] = counterValue(m.seconds[opStream][e])
		}
		s.DecodedOut += counterValue(m.out[opDecode][e])
	}
	s.Bombs, s.CodingError = counterValue(m.bombs), counterValue(m.errors)
	s.Deferred, s.IdentityNow = counterValue(m.formsDeferred), counterValue(m.identityNow)
	s.OverBudget = map[string]float64{"encode": counterValue(m.overBudget[opEncode]), "decode": counterValue(m.overBudget[opDecode])}
	for e := range coding.Count {
		s.LargerForms += counterValue(m.larger[e])
	}
	return s
}

// childrenOf resolves a one-label counter's children for values, so that
// each is exported from the start and counted without a look-up.
func childrenOf(v *prometheus.CounterVec, values ...string) map[string]prometheus.Counter {
	out := make(map[string]prometheus.Counter, len(values))
	for _, x := range values {
		out[x] = v.WithLabelValues(x)
	}
	return out
}

// FieldStats counts client request fields not forwarded as sent, by
// action (dropped, replaced, keyed), for the status page.
func (h *Handler) FieldStats() map[string]float64 {
	m := h.metrics
	return map[string]float64{fieldDropped: counterValue(m.fieldDropped), fieldReplaced: counterValue(m.fieldReplaced), fieldKeyed: counterValue(m.fieldKeyed)}
}

// counterValue reads a counter (0 for the discard counters).
func counterValue(c prometheus.Counter) float64 {
	if _, ok := c.(discard); ok {
		return 0
	}
	var d dto.Metric
	if err := c.Write(&d); err != nil || d.Counter == nil {
		return 0
	}
	return d.Counter.GetValue()
}
