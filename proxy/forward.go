package proxy

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"

	"github.com/edgecache/edge/coding"
	"github.com/edgecache/edge/internal/clientaddr"
	"github.com/edgecache/edge/internal/reqfield"
)

// This file owns what the origin sees of a client request. The rule that
// keeps users apart: the cache key and the Vary key are computed from the
// request exactly as it is forwarded, so two requests that the origin could
// tell apart never share an entry, and a field the edge removes or replaces
// cannot select a variant the origin never saw.

// What each client field may do is reqfield's table, shared with the
// HTTP/1.1 hit path. The labels of edge_request_fields_total:
const (
	fieldDropped  = "dropped"  // never forwarded
	fieldReplaced = "replaced" // an untrusted client's forwarding field: the edge writes its own
	fieldKeyed    = "keyed"    // forwarded and part of the variant key
)

// edgeSetFields are the lower-case names of the fields the edge writes on
// every forwarded request; a Vary on one of them is keyed on the value the
// edge sends.
var edgeSetFields = [...]string{"x-forwarded-for", "x-forwarded-host", "x-forwarded-proto", "forwarded", "x-real-ip", "via", "surrogate-capability"}

// trusted reports whether r's forwarding fields may be believed: an
// authenticated cluster peer relayed it (Inbound.Relayed), or it came from
// an address in forwarding.trusted_proxies.
func (h *Handler) trusted(r *http.Request) bool {
	if inboundOf(r).Relayed {
		return true
	}
	return clientaddr.In(r.RemoteAddr, h.cfg.TrustedProxies)
}

// sanitize rewrites a client request in place into the request the cache
// reasons about: hop-by-hop fields and the fields Connection names are gone
// (they are never forwarded, so they must not select a variant), the
// peer-protocol, rewrite, method-override and underscore fields are gone,
// an untrusted client's forwarding fields are gone (the edge writes its
// own), and the query is normalised only when the operator opted in. What
// is left reaches the origin; of it, what reqfield does not know is keyed
// (fieldKey). It only deletes and trims (trimFieldValues), so the hit path
// stays free of allocations.
func (h *Handler) sanitize(r *http.Request) {
	hd := r.Header
	if len(hd["Connection"]) > 0 || len(hd["Te"]) > 0 || len(hd["Upgrade"]) > 0 || len(hd["Keep-Alive"]) > 0 ||
		len(hd["Proxy-Connection"]) > 0 || len(hd["Proxy-Authorization"]) > 0 || len(hd["Trailer"]) > 0 {
		removeHopByHop(hd)
	}
	for _, name := range h.cfg.StripRequestHeaders {
		delete(hd, name)
	}
	// A host field beside :authority (RFC 9113 §8.3.1, RFC 9114 §4.3.1:
	// allowed when they agree; net/http's HTTP/2 server and quic-go's
	// HTTP/3 server leave it in Header): gone, so that a request reads as
	// HTTP/1.1's does (net/http never puts Host in Header). r.Host names
	// the site, the key and the forwarded Host; Go's client never sends
	// the field. (Peer MACs leave it out: cluster/auth.go.)
	delete(hd, "Host")
	trust := 0   // looked up only when a forwarding field is there: 1 yes, -1 no
	relayed := 0 // looked up only when a field is dropped: 1 yes, -1 no
	for name, vals := range hd {
		trimFieldValues(vals)
		switch reqfield.Classify(name) {
		case reqfield.Dropped:
			delete(hd, name)
			if relayed == 0 {
				relayed = -1
				if inboundOf(r).Relayed {
					relayed = 1
				}
			}
			// A relayed request's dropped fields are the peer protocol's
			// own (the ingress dropped its client's before relaying):
			// counted, they made edge_request_fields_total{action="dropped"}
			// read a dozen suspicious client fields per peer hop.
			if relayed < 0 {
				h.metrics.fieldDropped.Inc()
			}
		case reqfield.Forwarding:
			if trust == 0 {
				trust = -1
				if h.trusted(r) {
					trust = 1
				}
			}
			if trust < 0 {
				delete(hd, name)
				h.metrics.fieldReplaced.Inc()
			}
		case reqfield.Keyed:
			if _, ok := h.unkeyed[name]; !ok {
				h.metrics.fieldKeyed.Inc()
			}
		}
	}
	if h.cfg.SortQuery && r.URL.RawQuery != "" {
		r.URL.RawQuery = h.keyQuery(r.URL.RawQuery)
		r.RequestURI = r.URL.RequestURI()
	}
}

// trimFieldValues takes the spaces and tabs off both ends of each value,
// in place (a substring: no allocation). HTTP/1.1's parser strips them
// (RFC 9110 §5.5), but HTTP/2 and HTTP/3 frames carry a value as sent,
// and every server here (h2server, x/net's, quic-go's) passes a padded
// one on though RFC 9113 §8.2.1 calls it malformed: the key (VaryKey)
// trimmed it while the origin, over HTTP/2, saw " https://app.test" and
// refused CORS, and that answer was stored as the variant of
// "https://app.test" for every user (a review's
// TestS24H2WhitespaceOriginPoisonsVaryVariantForHTTP11). The key and the
// origin now read the same value.
func trimFieldValues(vals []string) {
	for i, v := range vals {
		if v != "" && (isOWS(v[0]) || isOWS(v[len(v)-1])) {
			vals[i] = strings.Trim(v, " \t")
		}
	}
}

func isOWS(c byte) bool { return c == ' ' || c == '\t' }

// fieldKeySep starts the keyed-field part of a variant key: a NUL, which
// no field value or Vary key can hold.
const fieldKeySep = "\x00fields "

// madeForKeyedFields reports whether a variant key was made for a request
// with keyed fields.
func madeForKeyedFields(varyKey string) bool { return strings.Contains(varyKey, fieldKeySep) }

// fieldKey returns the part of r's variant key made of the fields reqfield
// does not know (and the operator did not declare unkeyed in
// forwarding.unkeyed_headers): "" for a request without any, which is
// every browser's. A request that carries X-Forwarded-Prefix-like fields
// the table misses gets a variant of its own: the origin still sees the
// field, and no one else is served what it made of it. A field a rule set
// to the same value for every request of the key (uniform, see
// ruling.uniformEdits) is not the request's and is not keyed.
func (h *Handler) fieldKey(hd http.Header, uniform [][2]string) string {
	var stack [8]string
	names := stack[:0]
	for name := range hd {
		if reqfield.Classify(name) != reqfield.Keyed {
			continue
		}
		if _, ok := h.unkeyed[name]; ok {
			continue
		}
		if setTo(uniform, name, hd[name]) {
			continue
		}
		names = append(names, name)
	}
	if len(names) == 0 {
		return ""
	}
	slices.Sort(names)
	// The values are hashed: a custom field may hold a credential, and the
	// variant key is written to disk with the entry.
	sum := sha256.New()
	var b strings.Builder
	b.WriteString(fieldKeySep)
	for i, name := range names {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strings.ToLower(name))
		for _, v := range hd[name] {
			_, _ = io.WriteString(sum, name)
			sum.Write([]byte{0})
			_, _ = io.WriteString(sum, v)
			sum.Write([]byte{0})
		}
	}
	b.WriteByte(' ')
	var digest [sha256.Size]byte
	b.WriteString(hex.EncodeToString(sum.Sum(digest[:0])[:16]))
	return b.String()
}

// setTo reports whether edits set name to exactly values.
func setTo(edits [][2]string, name string, values []string) bool {
	for _, kv := range edits {
		if kv[0] == name {
			return len(values) == 1 && values[0] == kv[1]
		}
	}
	return false
}

// forwardHeader returns the header fields the upstream receives for r (a
// sanitized request): the client's fields plus Via, Surrogate-Capability
// and the forwarding fields the edge writes.
func (h *Handler) forwardHeader(r *http.Request) http.Header {
	out := r.Header.Clone()
	if out == nil {
		out = http.Header{}
	}
	out.Add("Via", h.via)
	if h.cfg.Compression != nil {
		// The edge encodes for the client itself: one identity body from
		// upstream serves every Accept-Encoding (compress.go).
		out["Accept-Encoding"] = acceptIdentity
	}
	if d := h.policy().SurrogateDevice; d != "" {
		out.Set("Surrogate-Capability", d+`="Surrogate/1.0"`)
	}
	// The scheme the edge keys and judges the request by, in every field
	// that tells the origin one: told another, a force-https origin
	// answers with a redirect the edge would store as the page.
	proto := h.scheme(r)
	ip := clientIP(r)
	if prior := out.Get("X-Forwarded-For"); prior != "" && ip != "" {
		out.Set("X-Forwarded-For", prior+", "+ip)
	} else if ip != "" {
		out.Set("X-Forwarded-For", ip)
	}
	// The forwarded host is the one the cache key uses (no port), so the
	// origin cannot build a page from a port the key does not see.
	if out.Get("X-Forwarded-Host") == "" {
		out.Set("X-Forwarded-Host", stripPort(r.Host))
	}
	if v := out["X-Forwarded-Proto"]; len(v) != 1 || v[0] != proto {
		// A trusted party's list, another spelling ("HTTPS", which
		// origins that compare bytes read as plain http), or a value
		// scheme does not read as http or https: the origin gets the
		// scheme the key has.
		out.Set("X-Forwarded-Proto", proto)
	}
	if out.Get("X-Real-Ip") == "" && ip != "" {
		out.Set("X-Real-Ip", ip)
	}
	elem := "for=" + forwardedNode(ip) + ";host=" + quoteForwarded(stripPort(r.Host)) + ";proto=" + proto
	if prior := out.Get("Forwarded"); prior != "" {
		out.Set("Forwarded", prior+", "+elem)
	} else {
		out.Set("Forwarded", elem)
	}
	return out
}

// forwardedNode formats a client address as an RFC 7239 node.
func forwardedNode(ip string) string {
	if ip == "" {
		return "unknown"
	}
	if strings.Contains(ip, ":") {
		return `"[` + ip + `]"`
	}
	return ip
}

// quoteForwarded quotes a Forwarded value unless it is a plain token.
func quoteForwarded(v string) string {
	for i := 0; i < len(v); i++ {
		c := v[i]
		if c != '-' && c != '.' && c != '_' && (c < '0' || c > '9') && (c < 'a' || c > 'z') && (c < 'A' || c > 'Z') {
			return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(v) + `"`
		}
	}
	return v
}

// varyKey computes the variant key of r for names from the fields as
// forwarded, followed by the fields the cache keys because it does not know
// them (fieldKey). Only a Vary on a field the edge writes itself needs the
// full forwarded header; every other name reads the sanitized request.
func (h *Handler) varyKey(names []string, r *http.Request) string {
	vk := ""
	if len(names) > 0 {
		hd := r.Header
		for _, n := range names {
			if slices.Contains(edgeSetFields[:], n) {
				hd = h.forwardHeader(r)
				break
			}
		}
		vk = VaryKey(names, hd)
	}
	g := rulingOf(r)
	return vk + h.fieldKey(r.Header, g.uniformEdits()) + g.editKey() + g.keyRule().KeyExtra(r.Header)
}

// outboundRequest copies a sanitized r for the upstream. With forFill the
// client's own conditional and range fields are dropped: the cache fetches
// the whole response so that it can store it and answer them itself.
func (h *Handler) outboundRequest(r *http.Request, ctx context.Context, forFill bool) *http.Request {
	out := r.Clone(ctx)
	out.RequestURI = ""
	out.Header = h.forwardHeader(r)
	// A client's Connection: close (or HTTP/1.0) is about its own hop
	// (RFC 9110 §7.6.1), as the field itself, which forwardHeader drops:
	// carried in Close it made every such miss open a new origin
	// connection, and a TLS handshake, and leave it in TIME_WAIT.
	out.Close = false
	if forFill {
		for _, k := range [...]string{"If-None-Match", "If-Modified-Since", "If-Match", "If-Unmodified-Since", "Range", "If-Range"} {
			delete(out.Header, k)
		}
		out.Method = http.MethodGet
	}
	if forFill || r.Method == http.MethodGet || r.Method == http.MethodHead {
		// The cache never forwards a GET's or HEAD's body (it stopped
		// reading it: see dropUnreadBody).
		out.Body = http.NoBody
		out.ContentLength = 0
		out.TransferEncoding = nil
		delete(out.Header, "Content-Length")
	}
	return out
}

// splicesCodings reports whether resp, an origin's 206 to r, must give
// way to the whole page. Either it may not continue the bytes the client
// holds: r's If-Range is no strong entity-tag, r takes a coding the edge
// streams in, and the edge encodes the whole page as it streams it, so
// the client's first part may have come encoded (a date names the page,
// not an encoding's bytes). Or it is a range of a coding r does not take
// (an origin that stores gzip and cuts ranges of it): the whole page is
// decoded for r as it streams, as it would be had the edge stored it (a
// review's TestS65PassedRangeOfAnOriginGzipBodyReachesAnIdentityClient).
func (h *Handler) splicesCodings(r *http.Request, resp *http.Response) bool {
	if h.cfg.Compression == nil || resp.StatusCode != http.StatusPartialContent {
		return false
	}
	if enc, ok := coding.OfBody(resp.Header["Content-Encoding"]); ok && enc != coding.Identity &&
		!ParseCacheControl(resp.Header, "Cache-Control").NoTransform &&
		coding.Negotiate(r.Header["Accept-Encoding"], coding.Set(0).With(coding.Identity).With(enc)) != enc {
		return true
	}
	if len(r.Header["If-Range"]) == 0 || strongTag(r.Header.Get("If-Range")) ||
		coding.NegotiateStream(r.Header["Accept-Encoding"], h.cfg.Compression.Offer) == coding.Identity {
		return false
	}
	_, compress, _ := h.codable(http.StatusOK, wholeOf(resp.Header))
	return compress
}

// wholeOf is a 206's header as its whole 200's would read: no
// Content-Range, the total as Content-Length.
func wholeOf(partial http.Header) http.Header {
	whole := partial.Clone()
	delete(whole, "Content-Range")
	delete(whole, "Content-Length")
	if _, total, ok := strings.Cut(partial.Get("Content-Range"), "/"); ok && total != "*" {
		whole.Set("Content-Length", strings.TrimSpace(total))
	}
	return whole
}

// wholeCodable reports whether the 200 that a relayed 304 or 206 stands
// for is one whose coding the edge chooses by Accept-Encoding (codable).
// A 304 that does not say the type is taken as such: a Vary too many
// costs a downstream cache a variant, one too few serves gzip to a
// client that cannot read it.
func (h *Handler) wholeCodable(status int, hdr http.Header) bool {
	if h.cfg.Compression == nil {
		return false
	}
	switch status {
	case http.StatusPartialContent:
		_, _, ok := h.codable(http.StatusOK, wholeOf(hdr))
		return ok
	case http.StatusNotModified:
		if ParseCacheControl(hdr, "Cache-Control").NoTransform {
			return false
		}
		if hdr.Get("Content-Type") == "" {
			return true
		}
		whole := hdr.Clone()
		delete(whole, "Content-Length") // a 304's says nothing of the body's size
		_, _, ok := h.codable(http.StatusOK, whole)
		return ok
	}
	return false
}

// clientIP returns the address of the client connection.
func clientIP(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}
