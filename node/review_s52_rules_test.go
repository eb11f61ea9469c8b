package node

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// TestS52HeadRuleFillIsServedToAGetByTheHitPath: the HTTP/1.1 hit path's
// version of proxy's TestHeadRuleFillIsNotServedToAGetUnderASetRule. A
// rule for HEAD alone ahead of a rule that sets a secret request field
// makes ServeHTTP key a GET's variant on that field (uniformEdits is nil
// when HEAD's rule is not the key rule), so a GET never reads the entry a
// HEAD filled without the field. proxy.AppendHit looks up the plain
// variant (lookupPlain: VaryKey "") and never asks about the key rule's
// request edits: anyone's HEAD fills the plain variant with the answer the
// origin made for a request without the secret, and every plain GET the
// hit path reads is served it.
func TestS52HeadRuleFillIsServedToAGetByTheHitPath(t *testing.T) {
	var calls atomic.Int64
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		if r.Header.Get("X-Origin-Token") != "s3cret" {
			_, _ = io.WriteString(w, "direct access: use the CDN")
			return
		}
		_, _ = io.WriteString(w, "the page")
	}))
	defer origin.Close()
	n := startNodeYAML(t, "listen: '"+freeAddr(t)+"'\nadmin: {listen: '"+freeAddr(t)+"', token: tok}\n"+
		"tuning: {hit_path: true}\n"+
		"sites:\n  - name: shop\n    hosts: [shop.test]\n    origins: ['"+origin.URL+"']\n"+
		"    rules:\n"+
		"      - {name: probes, match: {methods: [HEAD]}, default_ttl: 5m}\n"+
		"      - {name: pages, default_ttl: 5m, request_headers: {set: {X-Origin-Token: s3cret}}}\n")
	addr := n.PublicAddr()

	// Anyone's HEAD: a miss, which fills the URL's plain variant.
	hr, _ := rawAsk(t, addr, "HEAD /page HTTP/1.1\r\nHost: shop.test\r\nConnection: close\r\n\r\n")
	t.Logf("HEAD: %d (Cache-Status %q)", hr.StatusCode, hr.Header.Get("Cache-Status"))
	// The fill is stored once the origin's answer is in.
	deadline := time.Now().Add(5 * time.Second)
	for calls.Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond)

	// ServeHTTP's reading of a GET (a request directive that does not
	// change a fresh hit sends it there).
	sr, sb := rawAsk(t, addr, "GET /page HTTP/1.1\r\nHost: shop.test\r\nCache-Control: max-stale=1\r\nConnection: close\r\n\r\n")
	if sb != "the page" {
		t.Fatalf("net/http's path: GET /page got %q (Cache-Status %q); the control is broken", sb, sr.Header.Get("Cache-Status"))
	}

	before := n.hitM.Stats().Answered
	fr, fb := rawAsk(t, addr, "GET /page HTTP/1.1\r\nHost: shop.test\r\nConnection: close\r\n\r\n")
	answered := n.hitM.Stats().Answered - before
	if fb != "the page" {
		t.Errorf("plain GET /page after anyone's HEAD got %q (Cache-Status %q, hit path answered %d): the answer the origin made for a request without the rule's X-Origin-Token, which net/http's path never serves to a GET",
			fb, fr.Header.Get("Cache-Status"), answered)
	}
	if strings.Contains(fb, "direct") && answered == 0 {
		t.Log("(served by net/http's path, not the hit path)")
	}
}

// TestS52HeadRuleFillIsServedToAnH2GetByTheHitPath: the same through edge's
// HTTP/2 server, whose read loop asks the same answerer (one hit decision
// for both protocols): an h2 GET after anyone's HEAD is served the answer
// made without the rule's secret field.
func TestS52HeadRuleFillIsServedToAnH2GetByTheHitPath(t *testing.T) {
	var calls atomic.Int64
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		if r.Header.Get("X-Origin-Token") != "s3cret" {
			_, _ = io.WriteString(w, "direct access: use the CDN")
			return
		}
		_, _ = io.WriteString(w, "the page")
	}))
	defer origin.Close()
	cp, kp := writePair(t, t.TempDir(), "a", []string{"a.test"}, 1)
	n := startNodeYAML(t, "listen: '"+freeAddr(t)+"'\nadmin: {listen: '"+freeAddr(t)+"'}\n"+
		"tls: {listen: '"+freeAddr(t)+"', cert_file: '"+cp+"', key_file: '"+kp+"'}\n"+
		"tuning: {hit_path: true, http2_server: edge}\n"+
		"sites:\n  - name: a\n    hosts: [a.test]\n    origins: ['"+origin.URL+"']\n"+
		"    rules:\n"+
		"      - {name: probes, match: {methods: [HEAD]}, default_ttl: 5m}\n"+
		"      - {name: pages, default_ttl: 5m, request_headers: {set: {X-Origin-Token: s3cret}}}\n")
	c := rvH2Dial(t, n.tls.ln.Addr().String())
	t.Logf("HEAD: %s", c.ask(1, ":method", "HEAD", ":scheme", "https", ":authority", "a.test", ":path", "/page"))
	deadline := time.Now().Add(5 * time.Second)
	for calls.Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond)
	slow := c.ask(3, ":method", "GET", ":scheme", "https", ":authority", "a.test", ":path", "/page", "cache-control", "max-stale=1")
	if !strings.HasSuffix(slow, `"the page"`) {
		t.Fatalf("ServeHTTP's GET: %s; the control is broken", slow)
	}
	if fast := c.ask(5, ":method", "GET", ":scheme", "https", ":authority", "a.test", ":path", "/page"); !strings.HasSuffix(fast, `"the page"`) {
		t.Errorf("h2 plain GET /page after anyone's HEAD: %s; ServeHTTP serves a GET only the answer made with the rule's X-Origin-Token", fast)
	}
}
