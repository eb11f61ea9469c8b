package proxy

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
)

// s34FormOrigin answers "the page" with Cache-Control: max-age=600 (the
// origin gives every answer the same freshness: nginx's `add_header
// Cache-Control … always`), and status with the same field when refuse
// says the request is one it refuses.
func s34FormOrigin(t *testing.T, status int, refuse func(*http.Request) bool) (string, *atomic.Int32) {
	t.Helper()
	var fetches atomic.Int32
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fetches.Add(1)
		w.Header().Set("Cache-Control", "max-age=600")
		if refuse(r) {
			w.WriteHeader(status)
			_, _ = w.Write([]byte("refused"))
			return
		}
		_, _ = w.Write([]byte("the page"))
	}))
	t.Cleanup(origin.Close)
	return origin.URL, &fetches
}

// A review found (now mended): 428, 429 and 511 answers are stored and served to everyone.
// RFC 6585 §3, §4 and §6 say of each "Responses with the 4xx/511 status
// code MUST NOT be stored by a cache" (431's §5 says the same, and 431 is
// the one of the four the fix lists). 429 is about the client that drew it
// (the origin counts per X-Forwarded-For); 428 about the request lacking a
// precondition; 511 about the client's network.
//
// Steps: origin gives every answer max-age=600; one client (a Referer: the
// origin's stand-in for "this client is over its rate") draws the status;
// then a plain client asks the same URL.
// Expected: the plain client gets the page (the status was not stored).
// Got: the plain client gets the stored 429 (428, 511) from the store
// for ten minutes: a client that gets itself rate-limited at the origin
// takes the page away from everyone (CPDoS), with no request-error reason.
func TestS34RFC6585StatusesAreNotStored(t *testing.T) {
	for _, status := range []int{428, 429, 511} {
		t.Run(strconv.Itoa(status), func(t *testing.T) {
			base, fetches := s34FormOrigin(t, status, func(r *http.Request) bool { return r.Header.Get("Referer") != "" })
			h := proxyFor(t, base, nil)
			ask := func(attack bool) *httptest.ResponseRecorder {
				r := httptest.NewRequest("GET", "http://shop.test/p", nil)
				if attack {
					r.Header.Set("Referer", "https://a.test/")
				}
				w := httptest.NewRecorder()
				h.ServeHTTP(w, r)
				h.Wait()
				return w
			}
			if w := ask(true); w.Code != status {
				t.Fatalf("the refused request: %d, want %d", w.Code, status)
			}
			if w := ask(false); w.Code != http.StatusOK || w.Body.String() != "the page" {
				t.Fatalf("after one client's %d: a plain request got %d %q (%s) after %d fetches; RFC 6585: MUST NOT be stored by a cache",
					status, w.Code, w.Body.String(), w.Header().Get("Cache-Status"), fetches.Load())
			}
		})
	}
}

// A review found (now mended): a 414 (URI Too Long, RFC 9110 §15.5.15: about the request
// message's target, as 431 is about its fields) is stored under a key
// that does not hold the URI that drew it. With a site rule that drops
// utm_* from the key (the commonest key rule), one request whose utm_x is
// longer than the origin takes stores the origin's 414 as the page.
//
// Steps: rule `{name: pages, key: {ignore_params: [utm_*]}}`; the origin
// answers any URI over 2 KiB 414 with its usual max-age=600; one client
// asks /p?utm_x=<4 KiB>; then a plain client asks /p.
// Expected: the page (the 414 answered that request's URI, not /p).
// Got: the stored 414 for everyone for ten minutes (CPDoS: the fix's
// list of answers to the request's form leaves out 414, which
// heuristicStatus even makes storable with no freshness at all).
func TestS34A414ToAnIgnoredParameterIsNotStoredAsThePage(t *testing.T) {
	base, fetches := s34FormOrigin(t, http.StatusRequestURITooLong, func(r *http.Request) bool { return len(r.URL.RequestURI()) > 2048 })
	site := ruleSite(t, `[{name: pages, key: {ignore_params: [utm_*]}}]`)
	h := proxyFor(t, base, nil)
	ask := func(target string) *httptest.ResponseRecorder {
		r := httptest.NewRequest("GET", "http://shop.test"+target, nil)
		w := httptest.NewRecorder()
		h.ServeInbound(w, r, Inbound{Site: site})
		h.Wait()
		return w
	}
	if w := ask("/p?utm_x=" + strings.Repeat("a", 4096)); w.Code != http.StatusRequestURITooLong {
		t.Fatalf("the long request: %d, want the origin's 414", w.Code)
	}
	if w := ask("/p"); w.Code != http.StatusOK || w.Body.String() != "the page" {
		t.Fatalf("after one client's 414: /p got %d %q (%s) after %d fetches, want the page",
			w.Code, w.Body.String(), w.Header().Get("Cache-Status"), fetches.Load())
	}
}
