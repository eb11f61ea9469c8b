package proxy

import (
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Why fills are ordered: in a cluster a fill may wait on a peer (a climb
// up the page's path), and a peer's climb that reaches this node may join
// a fill here. A tree's path starts at a random leaf and leaves out the
// ingress, and nodes disagree on which pages are hot, so two nodes can
// each lie on the other's path: a climb joined a fill that waited,
// through others, on the climb's own sender, and both clients waited for
// the peer header timeout (4 × cluster.peer_timeout). Three static rules
// for which fills a climb may join were tried and measured (docs/cluster.md,
// "Climb"); each left a cycle or cost origin fetches.
//
// The rule here is the one deadlock avoidance uses for transactions
// (wound-wait's order, without the wound): every fill has a WaitOrder, a
// climb carries the order of the fill that sent it, and a fill led for a
// climb takes the climb's order. A climb joins a fill only if the fill
// cannot be waiting on anything (its header is in and its body is not
// streaming from a peer, or it fetches from the origin alone:
// FetchRequest.Direct) or it is strictly older than the climb's fill. Along any chain of waits the order then never grows and
// strictly falls at every join, so no chain comes back to where it began:
// there is no cycle, whatever the nodes believe about a page. A climb
// refused a join fetches for itself, its own order carried on; a client's
// request joins any fill (nothing waits on a client).

// WaitOrder orders fills across the cluster's nodes: by the time the
// fill's chain began (Unix ns on the node that began it), then by a
// random tie-breaker. Clocks that disagree change which of two fills
// waits for the other, never whether the order is total. The zero value
// is the oldest order: what a climb from a node that sends none carries.
type WaitOrder struct {
	At  int64
	Tie uint64
}

// NewWaitOrder is the order of a chain of fills beginning now.
func NewWaitOrder(now time.Time) WaitOrder {
	return WaitOrder{At: now.UnixNano(), Tie: rand.Uint64() | 1} // never the zero value
}

// Before reports whether o is strictly older than p.
func (o WaitOrder) Before(p WaitOrder) bool {
	return o.At < p.At || (o.At == p.At && o.Tie < p.Tie)
}

// IsZero reports whether o is the zero order (none was sent).
func (o WaitOrder) IsZero() bool { return o == WaitOrder{} }

// String is o's wire form, "<at>.<tie in hex>".
func (o WaitOrder) String() string {
	return strconv.FormatInt(o.At, 10) + "." + strconv.FormatUint(o.Tie, 16)
}

// ParseWaitOrder reads String's form.
func ParseWaitOrder(s string) (WaitOrder, bool) {
	at, tie, ok := strings.Cut(s, ".")
	if !ok || at == "" || tie == "" || len(tie) > 16 {
		return WaitOrder{}, false
	}
	a, err := strconv.ParseInt(at, 10, 64)
	if err != nil {
		return WaitOrder{}, false
	}
	t, err := strconv.ParseUint(tie, 16, 64)
	if err != nil {
		return WaitOrder{}, false
	}
	return WaitOrder{At: a, Tie: t}, true
}

// PeerWaiter is a Fetcher whose fetches may wait on fills at other nodes
// that may wait on this node's (the cluster's climbs).
type PeerWaiter interface {
	// ClimbOrder returns the order a request relayed along route carries;
	// ok is false for a request that is no peer's climb (a client's, a
	// probe).
	ClimbOrder(route any) (order WaitOrder, ok bool)
	// MayWaitOnPeers reports whether a fill for key led by a request with
	// route (nil: a client's) may wait on a peer. False is binding: its
	// fetch is made with FetchRequest.Direct and asks no peer to fetch.
	MayWaitOnPeers(key string, route any) bool
}

// fillWait is where a fill, or a request that would join one, stands in
// the wait order.
type fillWait struct {
	order WaitOrder
	// direct: the fill waits on no peer (FetchRequest.Direct).
	direct bool
	// climb: the request is a peer's climb, which the peer's fill waits on.
	climb bool
}

// waitOf places a fill for key led (or joined) by r.
func (h *Handler) waitOf(r *http.Request, key string) fillWait {
	w := h.orderOf(r)
	if pw, ok := h.fetcher.(PeerWaiter); ok {
		w.direct = !pw.MayWaitOnPeers(key, inboundOf(r).Route)
	}
	return w
}

// orderOf is r's order, and whether r is a peer's climb: the climb's own
// order, or a new chain's; direct when nothing can wait on a peer.
func (h *Handler) orderOf(r *http.Request) fillWait {
	pw, ok := h.fetcher.(PeerWaiter)
	if !ok {
		return fillWait{direct: true} // no peers: nothing to wait on
	}
	var w fillWait
	if w.order, w.climb = pw.ClimbOrder(inboundOf(r).Route); !w.climb {
		w.order = NewWaitOrder(time.Now())
	}
	return w
}

// joinableBy reports whether a request placed at w may wait on f without
// closing a cycle (see above).
func (f *fill) joinableBy(w fillWait) bool {
	if !w.climb {
		return true
	}
	select {
	case <-f.ready:
		// Its header is in, and its body comes from the origin, from
		// memory or has all come: it waits on no one now. A body still
		// streaming from a peer waits on that peer (whose own body may be
		// a sliced object's slices, fetched along paths that climb back
		// here: a review's cycle), and is placed by its order.
		if !f.peerBody || f.bodyDone() {
			return true
		}
	default:
	}
	return f.waitAt.direct || f.waitAt.order.Before(w.order)
}

// bodyDone reports whether the fill's body has ended.
func (f *fill) bodyDone() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.done
}
