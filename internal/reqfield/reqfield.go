// Package reqfield decides what a shared cache may do with each field of a
// client's request. It is the one table the proxy (what is forwarded, what
// is keyed) and the HTTP/1.1 hit path (what it may answer without the
// proxy) read, so that the two cannot disagree.
//
// The rule: every field that reaches the origin is either the edge's own,
// part of the cache key, or known not to select a representation without
// the origin saying so with Vary. A field the cache forwards but does not
// key is how one request poisons a page for everyone (an origin that
// renders X-Forwarded-Prefix into its script URLs); so the known set is an
// allow-list of standard fields, and any other field is keyed: a request
// that carries it gets an entry of its own, and the origin still sees it.
//
// No maintained library classifies request fields this way (the IANA
// registry lists names, not what a cache may do with them), hence this
// file.
package reqfield

import "strings"

// Class is what a shared cache does with a request field.
type Class uint8

const (
	// Keyed fields are forwarded and become part of the cache key: a field
	// the cache does not know may change the representation.
	Keyed Class = iota
	// Neutral fields are forwarded unkeyed: standard fields that either do
	// not select a representation or whose effect HTTP makes the origin
	// declare with Vary (RFC 9110 §12.5.5), which the cache honours.
	Neutral
	// Forwarding fields describe the path a request took (X-Forwarded-*,
	// Forwarded, X-Real-IP and their relatives). Origins that trust their
	// proxy render them into pages, so a client's values never pass: the
	// edge writes its own, and only a trusted proxy's pass unkeyed.
	Forwarding
	// Dropped fields are never forwarded: names with an underscore (CGI
	// and WSGI origins read X_Forwarded_Prefix as X-Forwarded-Prefix, and
	// nginx drops them for that reason), method overrides (a GET the
	// origin runs as a DELETE, its answer cached for the GET), URL
	// rewrites (the page of another URL cached under this one) and the
	// edge's own peer-protocol fields.
	Dropped
)

// String names the class for metrics and logs.
func (c Class) String() string {
	switch c {
	case Neutral:
		return "neutral"
	case Forwarding:
		return "forwarding"
	case Dropped:
		return "dropped"
	}
	return "keyed"
}

// EdgeWritten are the forwarding fields the edge writes on every forwarded
// request (canonical spelling), from what it knows of the connection.
var EdgeWritten = [...]string{"X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto", "Forwarded", "X-Real-Ip"}

// neutral are the standard request fields (lower-case) a shared cache may
// forward without keying: RFC 9110 and 9111's request fields, CORS, Fetch
// metadata, client hints (RFC 8942 requires Vary on them), and tracing
// fields that differ per request by design and are never rendered into a
// page.
var neutral = setOf(
	// RFC 9110 / 9111 / 9112 request fields.
	"accept", "accept-charset", "accept-encoding", "accept-language", "authorization", "cache-control",
	"connection", "content-encoding", "content-language", "content-length", "content-location", "content-range",
	"content-type", "cookie", "date", "expect", "from", "host", "if-match", "if-modified-since", "if-none-match",
	"if-range", "if-unmodified-since", "keep-alive", "max-forwards", "pragma", "proxy-authorization",
	"proxy-connection", "range", "referer", "te", "trailer", "transfer-encoding", "upgrade", "user-agent", "via",
	"early-data", "priority", "a-im", "http2-settings", "prefer", "accept-datetime", "digest", "want-digest",
	"content-digest", "repr-digest", "want-content-digest", "want-repr-digest", "content-md5",
	// The cache's own targeted field.
	"surrogate-capability",
	// CORS and browsers' request fields.
	"origin", "access-control-request-method", "access-control-request-headers", "access-control-request-private-network",
	"dnt", "sec-gpc", "upgrade-insecure-requests", "purpose", "sec-purpose", "service-worker", "service-worker-navigation-preload",
	"sec-websocket-key", "sec-websocket-version", "sec-websocket-extensions", "sec-websocket-protocol",
	"sec-fetch-dest", "sec-fetch-mode", "sec-fetch-site", "sec-fetch-user", "sec-fetch-storage-access",
	"save-data", "device-memory", "dpr", "viewport-width", "width", "downlink", "ect", "rtt",
	"attribution-reporting-eligible", "sec-browsing-topics", "sec-shared-storage-writable",
	// Tracing: unique per request; keying them would defeat the cache.
	"traceparent", "tracestate", "baggage", "x-request-id", "x-correlation-id", "b3",
	"x-b3-traceid", "x-b3-spanid", "x-b3-parentspanid", "x-b3-sampled", "x-b3-flags", "x-amzn-trace-id",
	"x-cloud-trace-context", "sentry-trace",
)

// neutralPrefixes are families of standard fields: client hints.
var neutralPrefixes = [...]string{"sec-ch-"}

// forwardingNames and forwardingPrefixes are the forwarding family. The
// prefixes catch relatives the list does not name (X-Forwarded-Prefix,
// -Port, -Scheme, -Ssl, -Server, -Uri, -Path …).
var forwardingNames = setOf(
	"forwarded", "x-real-ip", "x-host", "x-http-host", "x-original-host", "x-forwarded", "front-end-https",
	"x-url-scheme", "x-scheme", "x-client-ip", "true-client-ip", "x-cluster-client-ip", "cf-connecting-ip",
	"fastly-client-ip", "x-proxyuser-ip", "x-originating-ip", "x-remote-ip", "x-remote-addr", "client-ip",
	"x-forwarded-for", "x-forwarded-host", "x-forwarded-proto",
)

var forwardingPrefixes = [...]string{"x-forwarded-", "x-original-", "x-real-", "x-client-", "front-end-"}

// dropped are never forwarded (see Dropped).
var droppedNames = setOf(
	"x-http-method-override", "x-http-method", "x-method-override", "x-original-method",
	"x-original-url", "x-rewrite-url", "x-override-url",
)

var droppedPrefixes = [...]string{"edge-"}

func setOf(names ...string) map[string]struct{} {
	m := make(map[string]struct{}, len(names))
	for _, n := range names {
		m[n] = struct{}{}
	}
	return m
}

// maxName is the longest name classified without lower-casing into a heap
// buffer; longer names are Keyed unless they hold an underscore.
const maxName = 64

// Classify returns the class of a field name in any case.
func Classify(name string) Class {
	var buf [maxName]byte
	if len(name) > maxName {
		if strings.IndexByte(name, '_') >= 0 {
			return Dropped
		}
		return classifyLower([]byte(strings.ToLower(name)))
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		buf[i] = c
	}
	return classifyLower(buf[:len(name)])
}

// ClassifyLower is Classify for a name already in lower case (the hit
// path lower-cases into its own buffer).
func ClassifyLower(name []byte) Class {
	if len(name) > maxName {
		return Classify(string(name))
	}
	return classifyLower(name)
}

func classifyLower(name []byte) Class {
	// The compiler looks a map up by string(bytes) without allocating.
	if _, ok := neutral[string(name)]; ok {
		return Neutral
	}
	if _, ok := forwardingNames[string(name)]; ok {
		return Forwarding
	}
	if _, ok := droppedNames[string(name)]; ok {
		return Dropped
	}
	for i := range name {
		if name[i] == '_' {
			return Dropped
		}
	}
	return byPrefix(name)
}

func byPrefix(name []byte) Class {
	for _, p := range droppedPrefixes {
		if hasPrefix(name, p) {
			return Dropped
		}
	}
	for _, p := range forwardingPrefixes {
		if hasPrefix(name, p) {
			return Forwarding
		}
	}
	for _, p := range neutralPrefixes {
		if hasPrefix(name, p) {
			return Neutral
		}
	}
	return Keyed
}

func hasPrefix(b []byte, p string) bool { return len(b) >= len(p) && string(b[:len(p)]) == p }
