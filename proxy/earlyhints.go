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
// ingress's own miss that a peer answers), after the final answer has
// begun, to a request that asked for 100 Continue (net/http writes its
// 100 on the goroutine that reads the body, holding no lock a 103 takes:
// the two interleaved on the wire), and on net/http's own HTTP/2 server
// (tuning.http2_server: go), whose 1xx write can return while its frame
// writer still reads the header map the final answer goes on filling, a
// concurrent map access that ends the process (a hostile review saw it
// with -race; TestS38NoHintsOnNetHTTPsHTTP2Server).
//
// The 103s are written by a goroutine of the request's own, never by the
// transport's goroutine that reads the origin's answer: that one must go
// on to the final answer, which the requests that joined the fetch wait
// for, and a leader that stops reading would hold them all behind its
// full socket (the same review; node's
// TestEarlyHintsToAStalledLeaderHoldNoJoiner).

// Outcomes of an origin's 103 (edge_early_hints_total).
const (
	hintsRelayed = "relayed" // sent on to the client
	hintsDropped = "dropped" // no client it may go to, or no Link field in it
)

// maxRelayedHints bounds the 103s relayed per request; two is what a page
// needs (one from a CDN in front of the origin, one from the origin).
// origin.Client bounds how many 1xx answers it reads at all.
const maxRelayedHints = 2

// hintRelay passes an origin's 103s to one client while its fetch waits
// for the final answer. relay runs on the transport's goroutine and never
// blocks on the client: it queues the Link fields for the writer, a
// goroutine started with the first. stop, called on the request's
// goroutine before it writes anything else, ends the relay and waits for
// the writer, so the two never write at once and the 103s go first.
type hintRelay struct {
	mu      sync.Mutex
	w       http.ResponseWriter // nil once stopped, or when nothing may be relayed
	queued  int
	pending chan []string // Link fields for the writer; room for every 103 relayed
	written chan struct{} // closed when the writer ends; nil until it starts
	// extend sets a fresh write deadline (limits.write_timeout) before
	// each 103, as before each write of the final answer: net/http set
	// the connection's when the request came, and a 103 that arrives
	// later than that (a slow origin, a slow upload) failed its write,
	// which broke the connection and lost the final answer (a review's
	// TestS39LateHintOnHTTP1LosesTheWholeAnswer). It also bounds how long
	// stop waits on a client that does not read.
	extend  func(http.ResponseWriter)
	relayed prometheus.Counter
	dropped prometheus.Counter
}

// relayEarlyHints returns ctx asking the origin client for r's 103s, and
// the func that ends their relay (call it before writing to w).
func (h *Handler) relayEarlyHints(ctx context.Context, w http.ResponseWriter, r *http.Request) (context.Context, func()) {
	rl := &hintRelay{extend: h.extendWrite, relayed: h.metrics.earlyHints[hintsRelayed], dropped: h.metrics.earlyHints[hintsDropped]}
	if mayRelayHints(w, r) {
		rl.w = w
		rl.pending = make(chan []string, maxRelayedHints)
	}
	return origin.WithEarlyHints(ctx, rl.relay), rl.stop
}

// mayRelayHints: see the list above.
func mayRelayHints(w http.ResponseWriter, r *http.Request) bool {
	if inboundOf(r).Relayed || !r.ProtoAtLeast(1, 1) || len(r.Header["Expect"]) > 0 {
		return false
	}
	return r.ProtoMajor != 2 || writesInformationalInPlace(w)
}

// informationalInPlace is implemented by a ResponseWriter whose
// WriteHeader(1xx) is done with the header map when it returns (package
// h2server's).
type informationalInPlace interface{ WritesInformationalInPlace() }

// writesInformationalInPlace looks through the wrappers (Unwrap, as
// http.ResponseController does) for such a writer.
func writesInformationalInPlace(w http.ResponseWriter) bool {
	for {
		if _, ok := w.(informationalInPlace); ok {
			return true
		}
		u, ok := w.(interface{ Unwrap() http.ResponseWriter })
		if !ok {
			return false
		}
		w = u.Unwrap()
	}
}

func (rl *hintRelay) relay(fields http.Header) {
	links := fields["Link"]
	rl.mu.Lock()
	defer rl.mu.Unlock()
	if rl.w == nil || len(links) == 0 || rl.queued == maxRelayedHints {
		rl.dropped.Inc()
		return
	}
	rl.queued++
	rl.pending <- append([]string(nil), links...) // never blocks: room for maxRelayedHints
	if rl.written == nil {
		rl.written = make(chan struct{})
		go rl.write(rl.w, rl.written)
	}
}

// write sends each queued 103 until stop closes the queue.
func (rl *hintRelay) write(w http.ResponseWriter, written chan struct{}) {
	defer close(written)
	for links := range rl.pending {
		// WriteHeader(103) sends every field the header holds; it holds
		// the final answer's fields only once the fetch is back, but a
		// front may have set some already (Alt-Svc, HSTS): those wait for
		// the final answer.
		hdr := w.Header()
		kept := maps.Clone(hdr)
		clear(hdr)
		hdr["Link"] = links
		rl.extend(w)
		w.WriteHeader(http.StatusEarlyHints)
		clear(hdr)
		maps.Copy(hdr, kept)
		rl.relayed.Inc()
	}
}

func (rl *hintRelay) stop() {
	rl.mu.Lock()
	if rl.pending != nil && rl.w != nil {
		close(rl.pending) // relay queues nothing once w is nil
	}
	rl.w = nil
	written := rl.written
	rl.mu.Unlock()
	if written != nil {
		<-written
	}
}
