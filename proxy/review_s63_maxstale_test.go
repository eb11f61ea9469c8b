package proxy

import (
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// s63PersonalProxy is a handler with a settable clock in front of an
// origin that answers each sid cookie with that user's own page, marked
// for revalidation before every use ("max-age=0" or a past Expires) and
// given a validator: the idiom the cache's own rules_review2 test and
// staleOnErrorOK treat as "never meant to be reused" without the origin.
func s63PersonalProxy(t *testing.T, freshness map[string]string) (*Handler, *clock) {
	t.Helper()
	clk := &clock{now: t0}
	h, _ := handlerProxy(t, func(w http.ResponseWriter, r *http.Request) {
		user := "anonymous"
		if c, err := r.Cookie("sid"); err == nil {
			user = c.Value
		}
		w.Header().Set("Date", clk.Now().Format(http.TimeFormat))
		for k, v := range freshness {
			w.Header().Set(k, v)
		}
		w.Header().Set("ETag", `"`+user+`"`)
		if r.Header.Get("If-None-Match") == `"`+user+`"` {
			w.WriteHeader(http.StatusNotModified)
			return
		}
		_, _ = w.Write([]byte("account page of " + user))
	}, func(c *Config) { c.Now = clk.Now })
	return h, clk
}

// TestS63MaxStaleHandsOutAnotherUsersNeverFreshPage: an origin answers a
// logged-in user's request with her own page, "Cache-Control: max-age=0"
// (or an Expires in the past) and an ETag: a shared cache may keep it but
// must revalidate it before every use, and the revalidation of another
// user's request (his cookie, the stored ETag) gives him his own page.
// A client that adds "Cache-Control: max-stale" skips that validation:
// usable() returns useStale for any staleness, even of a copy that was
// never fresh, and an anonymous attacker reads Alice's page from the edge.
//
// The cache refuses exactly this elsewhere: staleOnErrorOK ("a response
// that was never fresh is never served this way: it was never meant to
// be reused"), and applyLifetime marks a rule's stale window on such an
// answer heuristic so that it is never stored from a cookie
// (TestRuleStaleWindowDoesNotShareACookieAnswerTheOriginKeptToRevalidation).
// RFC 9111 §4.2.4 and §5.2.1.2 let a client's max-stale permit a stale
// answer, so this is not a breach of the letter of RFC 9111; it is a
// breach of the cache's own invariant that an answer the origin kept to
// revalidation before every use, fetched with a cookie, never reaches
// another user without that revalidation (the cache's comments on
// staleOnErrorOK and applyLifetime), and the client choosing to skip it
// is the attacker, not the page's owner.
func TestS63MaxStaleHandsOutAnotherUsersNeverFreshPage(t *testing.T) {
	for name, freshness := range map[string]map[string]string{
		"max-age=0":    {"Cache-Control": "max-age=0"},
		"past-expires": {"Expires": t0.Add(-time.Hour).Format(http.TimeFormat)},
	} {
		for _, maxStale := range []string{"max-stale", "max-stale=3600"} {
			t.Run(name+"/"+maxStale, func(t *testing.T) {
				h, clk := s63PersonalProxy(t, freshness)
				alice := serve(h, "GET", "/account", "Cookie", "sid=alice")
				if !strings.Contains(alice.Body.String(), "alice") {
					t.Fatalf("alice: %d %q", alice.Code, alice.Body.String())
				}
				clk.Set(t0.Add(2 * time.Second))
				// A plain anonymous request is revalidated: the control case.
				if anon := serve(h, "GET", "/account"); strings.Contains(anon.Body.String(), "alice") {
					t.Fatalf("control: a plain anonymous GET got alice's page %q (%q)", anon.Body.String(), anon.Header().Get("Cache-Status"))
				}
				// alice fills it again (her own revalidation stores her copy).
				serve(h, "GET", "/account", "Cookie", "sid=alice")
				clk.Set(t0.Add(4 * time.Second))
				bob := serve(h, "GET", "/account", "Cache-Control", maxStale)
				if strings.Contains(bob.Body.String(), "alice") {
					t.Errorf("an anonymous request with %q got alice's page %q from the store (Cache-Status %q, Age %q): a copy the origin answered to her cookie with no freshness lifetime was handed out stale without validation",
						maxStale, bob.Body.String(), bob.Header().Get("Cache-Status"), bob.Header().Get("Age"))
				}
			})
		}
	}
}

// TestS63StaleWhileRevalidateIgnoresTheClientsMaxStaleBound: a client
// that says "Cache-Control: max-stale=5" accepts "a response that has
// exceeded its freshness lifetime by no more than" 5 seconds (RFC 9111
// §5.2.1.2). usable() checks the bound, and when the copy is staler than
// that it falls through to the origin's stale-while-revalidate window and
// serves it anyway (useSWR): 30 seconds stale to a client that accepts 5.
// RFC 9111 §4.2.4: a cache MUST NOT generate a stale response when an
// explicit in-protocol directive prohibits it; RFC 5861 §3 only lets a
// cache serve stale within the window, it does not override the client's
// own limit (as usable() already lets the client's max-age and min-fresh
// override it).
func TestS63StaleWhileRevalidateIgnoresTheClientsMaxStaleBound(t *testing.T) {
	for _, bound := range []int{0, 5} {
		t.Run("max-stale="+strconv.Itoa(bound), func(t *testing.T) {
			p := newTestProxy(t, nil)
			p.origin.set(originResp{header: map[string]string{"Cache-Control": "max-age=10, stale-while-revalidate=100"}, body: "v1"})
			if w := p.do("GET", "/p", nil); w.Code != http.StatusOK {
				t.Fatalf("fill: %d", w.Code)
			}
			p.clk.Set(t0.Add(40 * time.Second)) // 30 s stale, within the SWR window
			p.origin.set(originResp{header: map[string]string{"Cache-Control": "max-age=10"}, body: "v2"})
			w := p.do("GET", "/p", map[string]string{"Cache-Control": "max-stale=" + strconv.Itoa(bound)})
			age, _ := strconv.Atoi(w.Header().Get("Age"))
			if strings.Contains(w.Header().Get("Cache-Status"), "; hit") && age > 10+bound {
				t.Errorf("max-stale=%d: served %q from the store %d s stale (Age %d, lifetime 10 s), Cache-Status %q: past the client's stated bound",
					bound, w.Body.String(), age-10, age, w.Header().Get("Cache-Status"))
			}
		})
	}
}
