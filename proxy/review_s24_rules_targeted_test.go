package proxy

import (
	"net/http"
	"strings"
	"testing"
	"time"
)

// A review found (now mended): Edge-Cache-Control, the first of the default targeted fields
// (DefaultConfig: Policy.TargetedFields), decides whether a response is
// stored (storageFor reads resp.Header) but not how long it stays fresh
// nor whether it must be revalidated: sharedHeader calls removeEdgeHeaders,
// which deletes every "Edge-*" field (meant for the peer protocol), before
// newEntry's finishEntry reads the directives from the stored header. The
// entry then lives by Cache-Control, which RFC 9213 §2.1 says a cache that
// obeys a targeted field ignores. An origin that lets browsers keep a page
// an hour and the edge 5 s (Cache-Control: max-age=3600, Edge-Cache-Control:
// max-age=5), or tells the edge to revalidate every use (no-cache), gets the
// hour: after a purge-free update the edge serves the old page for an hour.
// Near the rules: a rule's lifetime is then applied to the wrong base (what
// counts as "longer than the origin's" is read from Cache-Control).
// Fix: keep the targeted fields (Edge-Cache-Control at least, those named in
// TargetedFields) out of removeEdgeHeaders for upstream responses, or compute
// the entry's directives from the upstream header before it is cleaned.
func TestS24EdgeCacheControlGovernsTheStoredLifetime(t *testing.T) {
	var version int
	p := newRuleProxy(t, ruleSite(t, `[{name: pages}]`), func(w http.ResponseWriter, r *http.Request) {
		version++
		w.Header().Set("Cache-Control", "max-age=3600")
		w.Header().Set("Edge-Cache-Control", "max-age=5")
		_, _ = writeString(w, "version "+string(rune('0'+version)))
	}, nil)
	p.get("/page")
	p.advance(10 * time.Second)
	w := p.get("/page")
	if strings.Contains(w.Body.String(), "version 1") {
		t.Errorf("10 s after a response with Edge-Cache-Control: max-age=5 the edge served it again (%q, Cache-Status %q, %d origin calls): its lifetime came from Cache-Control: max-age=3600",
			w.Body.String(), w.Header().Get("Cache-Status"), p.calls.Load())
	}
}
