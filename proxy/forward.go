package proxy

import (
	"context"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strings"
)

// This file owns what the origin sees of a client request. The rule that
// keeps users apart: the cache key and the Vary key are computed from the
// request exactly as it is forwarded, so two requests that the origin could
// tell apart never share an entry, and a field the edge removes or replaces
// cannot select a variant the origin never saw.

// forwardingFields are the request fields that describe the path a request
// took. A client may not set them (it could make the origin embed any host
// in a page that is then cached for everyone); the edge writes them itself
// from what it knows, keeping the prior values only from trusted proxies.
var forwardingFields = [...]string{"X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto", "Forwarded", "X-Real-Ip"}

// edgeSetFields are the lower-case names of the fields the edge writes on
// every forwarded request; a Vary on one of them is keyed on the value the
// edge sends.
var edgeSetFields = [...]string{"x-forwarded-for", "x-forwarded-host", "x-forwarded-proto", "forwarded", "via", "surrogate-capability"}

// trustedKey marks a request context whose forwarding fields come from a
// trusted party (an authenticated peer of the cluster).
type trustedKey struct{}

// WithTrustedForwarding marks ctx as carrying a request from a trusted
// proxy: its X-Forwarded-* and Forwarded fields are kept and extended. The
// cluster uses it for authenticated peer requests.
func WithTrustedForwarding(ctx context.Context) context.Context {
	return context.WithValue(ctx, trustedKey{}, true)
}

// trusted reports whether r's forwarding fields may be believed.
func (h *Handler) trusted(r *http.Request) bool {
	if v, _ := r.Context().Value(trustedKey{}).(bool); v {
		return true
	}
	if len(h.cfg.TrustedProxies) == 0 {
		return false
	}
	addr, err := netip.ParseAddr(clientIP(r))
	if err != nil {
		return false
	}
	addr = addr.Unmap()
	for _, p := range h.cfg.TrustedProxies {
		if p.Contains(addr) {
			return true
		}
	}
	return false
}

// sanitize rewrites a client request in place into the request the cache
// reasons about: hop-by-hop fields and the fields Connection names are gone
// (they are never forwarded, so they must not select a variant), the
// peer-protocol and rewrite fields are gone, untrusted forwarding fields
// are gone, and the query is normalised only when the operator opted in.
// It only deletes, so the hit path stays free of allocations.
func (h *Handler) sanitize(r *http.Request) {
	hd := r.Header
	if len(hd["Connection"]) > 0 || len(hd["Te"]) > 0 || len(hd["Upgrade"]) > 0 || len(hd["Keep-Alive"]) > 0 ||
		len(hd["Proxy-Connection"]) > 0 || len(hd["Proxy-Authorization"]) > 0 || len(hd["Trailer"]) > 0 {
		removeHopByHop(hd)
	}
	removeEdgeHeaders(hd)
	for _, name := range h.cfg.StripRequestHeaders {
		delete(hd, name)
	}
	for _, name := range forwardingFields {
		if _, ok := hd[name]; ok && !h.trusted(r) { // trust is looked up only when it matters
			for _, name := range forwardingFields {
				delete(hd, name)
			}
			break
		}
	}
	if h.cfg.SortQuery && r.URL.RawQuery != "" {
		r.URL.RawQuery = h.keyQuery(r.URL.RawQuery)
		r.RequestURI = r.URL.RequestURI()
	}
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
	proto := "http"
	if r.TLS != nil {
		proto = "https"
	}
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
	if out.Get("X-Forwarded-Proto") == "" {
		out.Set("X-Forwarded-Proto", proto)
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

// varyKey computes the Vary key of r for names from the fields as
// forwarded. Only a Vary on a field the edge writes itself needs the full
// forwarded header; every other name reads the sanitized request.
func (h *Handler) varyKey(names []string, r *http.Request) string {
	for _, n := range names {
		if slices.Contains(edgeSetFields[:], n) {
			return VaryKey(names, h.forwardHeader(r))
		}
	}
	return VaryKey(names, r.Header)
}

// outboundRequest copies a sanitized r for the upstream. With forFill the
// client's own conditional and range fields are dropped: the cache fetches
// the whole response so that it can store it and answer them itself.
func (h *Handler) outboundRequest(r *http.Request, ctx context.Context, forFill bool) *http.Request {
	out := r.Clone(ctx)
	out.RequestURI = ""
	out.Header = h.forwardHeader(r)
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

// clientIP returns the address of the client connection.
func clientIP(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}
