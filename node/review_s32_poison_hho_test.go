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

// s32pLimitedOrigin is an origin whose server takes smaller request heads
// than the edge (nginx's and Apache's 8 KB per line; here Go's own
// MaxHeaderBytes, answered 431 by net/http before the handler runs). Its
// pages are cacheable for maxAge seconds; failing, it answers 503.
type s32pLimitedOrigin struct {
	*httptest.Server
	calls   atomic.Int64
	failing atomic.Bool
}

func newS32pLimitedOrigin(t *testing.T, maxAge string) *s32pLimitedOrigin {
	t.Helper()
	o := &s32pLimitedOrigin{}
	o.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		o.calls.Add(1)
		if o.failing.Load() {
			http.Error(w, "origin down", http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Cache-Control", "max-age="+maxAge)
		w.Header().Set("Last-Modified", "Mon, 01 Jan 2024 00:00:00 GMT")
		_, _ = io.WriteString(w, "the page "+r.URL.Path)
	}))
	o.Config.MaxHeaderBytes = 4 << 10 // net/http allows 4 KiB more: heads over ~8 KiB get 431
	o.Start()
	t.Cleanup(o.Close)
	return o
}

// s32pHugeReferer is a standard, unkeyed field within the edge's 32 KiB
// head limit and beyond the origin's.
var s32pHugeReferer = "https://a.example/" + strings.Repeat("r", 14<<10)

// A review found (now mended: speaksForURL) CPDoS by header oversize turning the cache off for a URL for
// everyone. A request the origin rejects because of a field the edge
// forwards unkeyed (a 14 KiB Referer: the edge takes 32 KiB heads, nginx
// and Apache 8 KiB lines) gets a 4xx without freshness; the edge files it
// as "no-freshness", a reason about the URL, so the URL goes hit-for-pass
// (cache.pass_ttl, 30 s) for every visitor, not only for that request.
// Steps: cold URL; one GET with a 14 KiB Referer (origin answers 431); then
// plain GETs from ordinary visitors.
// Expected: the origin's refusal of one request's head says nothing about
// the URL (as whyStatus and the request-scoped reasons already do): the
// first plain visitor fills the page and the next are hits (1 origin
// fetch reaches the handler: the fill).
// Got: every plain visitor is passed to the origin (Cache-Status
// "fwd=bypass; fwd-status=200; detail=uncacheable"), and none of those
// cacheable 200s is stored; one attacker
// request every 30 s keeps the page uncached and uncoalesced for everyone,
// so the whole audience of a hot page lands on the origin.
func TestS32OversizedHeaderRefusalMakesTheURLPassForEveryone(t *testing.T) {
	o := newS32pLimitedOrigin(t, "600")
	n := startNode(t, o.URL, "")
	addr := n.PublicAddr()

	resp, _ := rawAsk(t, addr, "GET /hot HTTP/1.1\r\nHost: shop.test\r\nReferer: "+s32pHugeReferer+"\r\nConnection: close\r\n\r\n")
	if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Fatalf("precondition: the origin should refuse the attacker's head with 431, the attacker got %d (Cache-Status %q)", resp.StatusCode, resp.Header.Get("Cache-Status"))
	}
	before := o.calls.Load() // 0: net/http answered 431 before the handler
	var statuses []string
	for range 5 {
		resp, body := rawAsk(t, addr, "GET /hot HTTP/1.1\r\nHost: shop.test\r\nConnection: close\r\n\r\n")
		if resp.StatusCode != 200 || body != "the page /hot" {
			t.Fatalf("plain visitor got %d %q", resp.StatusCode, body)
		}
		statuses = append(statuses, resp.Header.Get("Cache-Status"))
	}
	if got := o.calls.Load() - before; got != 1 {
		t.Fatalf("after one request the origin refused for its oversized Referer, 5 plain visitors cost %d origin fetches (want 1 fill, then hits); Cache-Status:\n%s",
			got, strings.Join(statuses, "\n"))
	}
}

// A review found (now mended: speaksForURL) the same refusal, on a stale page, throwing away the copy
// stale-if-error keeps for an origin outage. The edge validates the stale
// copy with the attacker's request; the origin's 431 (a 4xx: no
// stale-if-error) is filed as a fresh answer about the URL that outdates
// the stale copy, which is removed for everyone.
// Steps: a page cached with max-age=1; wait until it is stale; one GET
// with a 14 KiB Referer (origin: 431); the origin then fails (503).
// Expected: a plain visitor gets the stale page (cache.stale_if_error,
// default 5 m), as it does without the attacker's request.
// Got: the stale copy is gone and the plain visitor gets the origin's 503
// (Cache-Status "fwd=bypass; fwd-status=503; detail=uncacheable"), while
// an untouched stale page next to it is still served.
// Why it matters: anyone can strip a site of its outage protection, page by
// page, just before (or during) an outage, with one oversized header each.
func TestS32OversizedHeaderRefusalDropsTheStaleIfErrorCopy(t *testing.T) {
	o := newS32pLimitedOrigin(t, "1")
	n := startNode(t, o.URL, "")
	addr := n.PublicAddr()
	for _, p := range []string{"/control", "/target"} {
		if resp, body := rawAsk(t, addr, "GET "+p+" HTTP/1.1\r\nHost: shop.test\r\nConnection: close\r\n\r\n"); resp.StatusCode != 200 || body != "the page "+p {
			t.Fatalf("fill %s: %d %q", p, resp.StatusCode, body)
		}
	}
	time.Sleep(2500 * time.Millisecond) // both copies stale (max-age=1), well inside the 5 m stale-if-error window
	resp, _ := rawAsk(t, addr, "GET /target HTTP/1.1\r\nHost: shop.test\r\nReferer: "+s32pHugeReferer+"\r\nConnection: close\r\n\r\n")
	if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Fatalf("precondition: the attacker should get the origin's 431, got %d (Cache-Status %q)", resp.StatusCode, resp.Header.Get("Cache-Status"))
	}
	o.failing.Store(true)
	cresp, cbody := rawAsk(t, addr, "GET /control HTTP/1.1\r\nHost: shop.test\r\nConnection: close\r\n\r\n")
	if cresp.StatusCode != 200 || cbody != "the page /control" {
		t.Fatalf("precondition: with the origin failing, the untouched stale page should be served stale-if-error; got %d %q (Cache-Status %q)", cresp.StatusCode, cbody, cresp.Header.Get("Cache-Status"))
	}
	tresp, tbody := rawAsk(t, addr, "GET /target HTTP/1.1\r\nHost: shop.test\r\nConnection: close\r\n\r\n")
	if tresp.StatusCode != 200 || tbody != "the page /target" {
		t.Fatalf("one request with an oversized Referer removed the stale copy: with the origin failing a plain visitor got %d %q (Cache-Status %q); the untouched page was served stale",
			tresp.StatusCode, tbody, tresp.Header.Get("Cache-Status"))
	}
}
