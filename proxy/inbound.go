package proxy

import (
	"context"
	"net/http"
)

// Inbound is what the front that accepted a request knows of it that the
// request does not say. The front hands it over with the request
// (ServeInbound); it is the only way anything reaches the proxy beside
// the request itself, and the proxy hands its Site and Route on to the
// fetcher in FetchRequest. The zero value is a request no front resolved
// (ServeHTTP: tests, tools).
type Inbound struct {
	Site *Site // the site the front resolved the Host to (nil: look it up)
	// Relayed: an authenticated cluster peer relayed the request. Its
	// forwarding fields are believed (X-Forwarded-Proto gives the key's
	// scheme) and its connection's TLS, the peer hop's, says nothing of
	// the client's.
	Relayed bool
	// Route is the cluster's state of the climb that brought the request
	// (nil for a client's), handed back to the fetcher untouched.
	Route any
	// Upstream, if not nil, is filled with who answered a miss and how
	// long it took, for the access log.
	Upstream *UpstreamInfo

	ruling *ruling // the request's cache rules, found once (rules.go)
}

// inboundKey carries a request's Inbound inside the proxy, from
// ServeInbound to the fetch; nothing outside this package sees it.
type inboundKey struct{}

// ServeInbound answers r as ServeHTTP does, with what its front knows.
func (h *Handler) ServeInbound(w http.ResponseWriter, r *http.Request, in Inbound) {
	if in.Site != nil || in.Relayed || in.Route != nil || in.Upstream != nil {
		r = r.WithContext(context.WithValue(r.Context(), inboundKey{}, &in))
	}
	h.serve(w, r)
}

// inboundOf returns r's Inbound (the zero value if none was given).
func inboundOf(r *http.Request) *Inbound {
	if in, ok := r.Context().Value(inboundKey{}).(*Inbound); ok {
		return in
	}
	return &noInbound
}

// clientTLS reports whether the client's connection was TLS. A relayed
// request's TLS is the peer hop's (cluster.tls), which must not change the
// key's scheme or what the origin is told: every node computes the same.
func clientTLS(r *http.Request) bool {
	return r.TLS != nil && !inboundOf(r).Relayed
}

// noInbound is the Inbound of a request without one; read-only.
var noInbound Inbound
