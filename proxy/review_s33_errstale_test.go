package proxy

import (
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// A review found (now mended): an origin that now refuses a page to everyone (access revoked,
// a takedown: 401, 403 or 451, "Cache-Control: private, no-store") no
// longer outdates the copy the cache holds (speaksForURL, commit a48a43a),
// and any anonymous client gets that copy back by asking for it stale.
//
// Steps: GET /doc → 200 "max-age=10", stored. 60 s later the origin
// answers every request for /doc with 403 (401, 451) "private, no-store".
// A client GETs /doc (gets the 403). Then another client GETs /doc with
// "Cache-Control: max-stale" (no value: any staleness, RFC 9111 §5.2.1.2;
// usable() honours it without StaleCeiling).
// Expected: the refusal, or at least not the page: before a48a43a the
// 403's no-store outdated the stale copy (aboutTheURL) and removed it, as a
// 404/410 still does (the control case below).
// Got: 200 with the revoked page, served from the cache; it stays
// servable this way until evicted (also to stale-while-revalidate and
// stale-if-error, whose windows keep handing it out while every
// revalidation is refused).
// Why it matters: 401/403 is how most origins take a page away (an S3
// bucket without ListBucket answers 403 for a deleted object; a paywall
// or a permission change answers 401/403 for everyone; 451 is the legal
// takedown status). The CPDoS concern (one client's oversize head drawing a
// 400/431) is about request-specific refusals; treating every 4xx but
// 404/410 as request-specific keeps content the origin withdrew, and hands
// it out to whoever sends max-stale.
func TestS33RevokedPageStaysServableByMaxStale(t *testing.T) {
	for _, status := range []int{http.StatusUnauthorized, http.StatusForbidden, http.StatusUnavailableForLegalReasons, http.StatusNotFound} {
		t.Run(strconv.Itoa(status), func(t *testing.T) {
			p := newTestProxy(t, nil)
			p.origin.set(originResp{header: map[string]string{"Cache-Control": "max-age=10"}, body: "secret draft v1"})
			if w := p.do("GET", "/doc", nil); w.Code != 200 {
				t.Fatalf("first GET: %d", w.Code)
			}
			p.clk.Set(t0.Add(time.Minute))
			p.origin.set(originResp{status: status, header: map[string]string{"Cache-Control": "private, no-store"}, body: "refused"})
			if w := p.do("GET", "/doc", nil); w.Code != status {
				t.Fatalf("GET after revocation: %d, want the origin's %d", w.Code, status)
			}
			w := p.do("GET", "/doc", map[string]string{"Cache-Control": "max-stale"})
			if w.Code == 200 && strings.Contains(w.Body.String(), "secret draft v1") {
				t.Errorf("after the origin answered %d private, no-store to a plain anonymous GET, a max-stale request still gets the withdrawn page from the cache: %d %q Cache-Status=%q",
					status, w.Code, w.Body.String(), w.Header().Get("Cache-Status"))
			}
		})
	}
}

// A review found (now mended): same root (speaksForURL): with stale-while-revalidate the
// refused page keeps being served to everyone for the whole window, each
// background revalidation's 403 leaving the copy in place.
//
// Steps: GET /p → 200 "max-age=1, stale-while-revalidate=3600", stored.
// 5 s later the origin answers 403 "private, no-store". Three plain
// anonymous GETs follow, each after the background refresh of the
// previous one has ended (Handler.Wait).
// Expected: the first may get the stale copy (SWR serves before it knows);
// its refresh's 403 no-store outdates it, so the later ones get the 403
// (as before a48a43a, and as a 404 still does).
// Got: every one gets the withdrawn page, for up to an hour.
func TestS33RevokedPageServedForTheWholeSWRWindow(t *testing.T) {
	p := newTestProxy(t, nil)
	p.origin.set(originResp{header: map[string]string{"Cache-Control": "max-age=1, stale-while-revalidate=3600"}, body: "secret draft v1"})
	if w := p.do("GET", "/p", nil); w.Code != 200 {
		t.Fatalf("first GET: %d", w.Code)
	}
	p.clk.Set(t0.Add(5 * time.Second))
	p.origin.set(originResp{status: http.StatusForbidden, header: map[string]string{"Cache-Control": "private, no-store"}, body: "refused"})
	_ = p.do("GET", "/p", nil) // served stale; its refresh gets the 403
	var leaked int
	for i := range 3 {
		p.clk.Set(t0.Add(time.Duration(10+i) * time.Second))
		w := p.do("GET", "/p", nil)
		if w.Code == 200 && strings.Contains(w.Body.String(), "secret draft v1") {
			leaked++
		}
	}
	if calls := p.origin.calls.Load(); calls < 3 {
		t.Fatalf("origin asked %d times: the refreshes did not run", calls)
	}
	if leaked > 0 {
		t.Errorf("%d of 3 GETs after a background revalidation drew 403 private, no-store still got the withdrawn page", leaked)
	}
}
