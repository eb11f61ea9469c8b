package proxy

import (
	"context"
	"maps"
	"net/http"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/edgecache/edge/origin"
)

// An origin that takes a while over a page can send 103 (Early Hints, RFC
// 8297) first, naming what the page will need (Link: </app.css>;
// rel=preload), so a browser fetches those while the origin works. A miss
// or a pass relays them to the client whose request went to the origin,
// and to no other: a 103 is the origin's answer to that request, like the
// final answer's per-user fields, so a request that joins the fetch, a
// hit, and the stored entry never see one. Only Link fields go on (the
// hints RFC 8297 defines; a Set-Cookie in a 103 would be a field the
// client has no business getting ahead of the final answer's checks).
//
// Not relayed: to an HTTP/1.0 client (RFC 9110 §15.2: no 1xx to it), to
// a peer's request (the cluster signs each answer whole, and the ingress
// asks the page's home for the page, not for hints), from a peer (the
// ingress's own miss that a peer answers), and after the final answer has
// begun.

// Outcomes of an origin's 103 (edge_early_hints_total).
const (
	hintsRelayed = "relayed" // sent on to the client
	hintsDropped = "dropped" // no client it may go to, or no Link field in it
)

// maxRelayedHints bounds the 103s relayed per request: net/http's client
// reads at most five 1xx answers to one request anyway; two is what a
// page needs (one from a CDN in front of the origin, one from the origin).
const maxRelayedHints = 2

// hintRelay passes an origin's 103s to one client while its fetch waits
// for the final answer. relay runs on the transport's goroutine; stop,
// called on the request's goroutine before it writes anything else, waits
// for a relay under way and ends the relay, so the two never write at once.
type hintRelay struct {
	mu      sync.Mutex
	w       http.ResponseWriter // nil once stopped, or when nothing may be relayed
	sent    int
	relayed prometheus.Counter
	dropped prometheus.Counter
}

// relayEarlyHints returns ctx asking the origin client for r's 103s, and
// the func that ends their relay (call it before writing to w).
func (h *Handler) relayEarlyHints(ctx context.Context, w http.ResponseWriter, r *http.Request) (context.Context, func()) {
	rl := &hintRelay{relayed: h.metrics.earlyHints[hintsRelayed], dropped: h.metrics.earlyHints[hintsDropped]}
	if !inboundOf(r).Relayed && r.ProtoAtLeast(1, 1) {
		rl.w = w
	}
	return origin.WithEarlyHints(ctx, rl.relay), rl.stop
}

func (rl *hintRelay) relay(fields http.Header) {
	links := fields["Link"]
	rl.mu.Lock()
	defer rl.mu.Unlock()
	if rl.w == nil || len(links) == 0 || rl.sent == maxRelayedHints {
		rl.dropped.Inc()
		return
	}
	rl.sent++
	// WriteHeader(103) sends every field the header holds; it holds the
	// final answer's fields only once the fetch is back, but a front may
	// have set some already (Alt-Svc): those wait for the final answer.
	hdr := rl.w.Header()
	kept := maps.Clone(hdr)
	clear(hdr)
	hdr["Link"] = append([]string(nil), links...)
	rl.w.WriteHeader(http.StatusEarlyHints)
	clear(hdr)
	maps.Copy(hdr, kept)
	rl.relayed.Inc()
}

func (rl *hintRelay) stop() {
	rl.mu.Lock()
	rl.w = nil
	rl.mu.Unlock()
}
