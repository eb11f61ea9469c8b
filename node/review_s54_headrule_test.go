package node

import (
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"
)

// TestS54HitPathServesAHeadFillWithoutTheGetRulesResponseEdits: the
// HTTP/1.1 hit path's view of proxy's
// TestS54HeadRuleFillIsServedToAGetWithoutItsRulesResponseEdits. A HEAD
// under a rule of its own fills the entry with the origin's fields
// unedited (the HEAD requester's address in a debug field the GET rule
// removes, no security policy the GET rule sets), and the hit path, as
// ServeHTTP, serves that head to every plain GET.
func TestS54HitPathServesAHeadFillWithoutTheGetRulesResponseEdits(t *testing.T) {
	var calls atomic.Int64
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		w.Header().Set("X-Debug-Client", r.Header.Get("X-Forwarded-For"))
		_, _ = io.WriteString(w, "the page")
	}))
	defer origin.Close()
	n := startNodeYAML(t, "listen: '"+freeAddr(t)+"'\nadmin: {listen: '"+freeAddr(t)+"', token: tok}\n"+
		"tuning: {hit_path: true}\n"+
		"sites:\n  - name: shop\n    hosts: [shop.test]\n    origins: ['"+origin.URL+"']\n"+
		"    rules:\n"+
		"      - {name: probes, match: {methods: [HEAD]}, default_ttl: 5m}\n"+
		"      - {name: pages, default_ttl: 5m, response_headers: {set: {Content-Security-Policy: \"default-src 'self'\"}, remove: [X-Debug-Client]}}\n")
	addr := n.PublicAddr()
	rawAsk(t, addr, "HEAD /page HTTP/1.1\r\nHost: shop.test\r\nConnection: close\r\n\r\n")
	deadline := time.Now().Add(5 * time.Second)
	for calls.Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond) // the fill is stored once the origin's answer is in

	before := n.hitM.Stats().Answered
	fr, fb := rawAsk(t, addr, "GET /page HTTP/1.1\r\nHost: shop.test\r\nConnection: close\r\n\r\n")
	answered := n.hitM.Stats().Answered - before
	if fb != "the page" {
		t.Fatalf("GET /page: %q; the control is broken", fb)
	}
	if v := fr.Header.Get("X-Debug-Client"); v != "" || fr.Header.Get("Content-Security-Policy") == "" {
		t.Errorf("plain GET /page after anyone's HEAD (hit path answered %d): X-Debug-Client %q, Content-Security-Policy %q (Cache-Status %q); the GET rule removes the one and sets the other",
			answered, v, fr.Header.Get("Content-Security-Policy"), fr.Header.Get("Cache-Status"))
	}
}
