package proxy

import (
	"bytes"
	"net"
	"net/http"
	"testing"
)

// A review found (regression of 316e73b, lower severity; now mended:
// isEdgeField, setEntryHeader, hitBlock.peerFields): sharedHeader now keeps
// Edge-Cache-Control in the stored copy, and nothing strips it on the way
// out: setEntryHeader (ServeHTTP) and hitBlockOf (the HTTP/1.1, HTTP/2 and
// peer-loop hit path) write e.Header as stored, so every client gets the
// origin's edge-only directive from a stored copy, while the same answer
// passed (stream: removeEdgeHeaders) carries none. Before 316e73b no
// Edge-* field ever reached a client (docs/cluster.md: Edge-* is the peer
// protocol's). A cache in front of the edge (a tier, a corporate proxy
// that honours Akamai's field) now applies a lifetime meant for this edge,
// on hits only; and the origin's per-tier policy is disclosed.
// Fix: strip the targeted fields this cache consumed (at least
// Edge-Cache-Control) when writing to a client that is not an
// authenticated peer (setEntryHeader, hitBlockOf, stream), and keep them
// only on answers to peers (Inbound.Relayed, the peer loop), which need
// them to compute the same lifetime.
func TestS25StoredEdgeCacheControlReachesClients(t *testing.T) {
	p := newRuleProxy(t, ruleSite(t, `[{name: pages}]`), func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=3600")
		w.Header().Set("Edge-Cache-Control", "max-age=60")
		w.Header().Set("Content-Type", "text/plain")
		_, _ = writeString(w, "page")
	}, nil)
	p.get("/page")
	w := p.get("/page")
	if v := w.Header().Get("Edge-Cache-Control"); v != "" {
		t.Errorf("ServeHTTP hit (Cache-Status %q) sent the client Edge-Cache-Control: %q", w.Header().Get("Cache-Status"), v)
	}
	client := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 40000}
	for _, peer := range []bool{false, true} {
		hr := HitRequest{Host: "shop.test", Path: "/page", Site: p.site, Remote: client}
		if peer {
			hr.Remote = nil // a peer's hit (the cluster listener's loop)
		}
		var a HitAnswer
		if !p.h.AppendHit(nil, &hr, []byte("Date: Mon, 02 Jan 2006 15:04:05 GMT\r\n"), &a) {
			t.Fatal("AppendHit declined a fresh plain hit")
		}
		p.h.ReleaseHit(a.Pinned, a.ClientIP)
		if got := bytes.Contains(a.Head, []byte("Edge-Cache-Control: max-age=60")); got != peer {
			t.Errorf("AppendHit for a peer %v wrote Edge-Cache-Control %v, want %v:\n%s", peer, got, peer, a.Head)
		}
	}
}
