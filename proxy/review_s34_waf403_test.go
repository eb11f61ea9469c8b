package proxy

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"testing"
)

// A review found (now mended for 403 and 405: passesForURL; the stale copy
// still goes, speaksForURL) one request a web application firewall refuses
// making its URL pass the cache for everyone again, and taking its stale copy: the CPDoS
// a48a43a closed (only 404 and 410 among the errors spoke for the URL),
// reopened by 89736e3 for 401, 403 and 405. A WAF answers a request by
// its fields (a scanner's User-Agent, a Referer or X-Forwarded-For it
// dislikes: unkeyed fields every client may send) with 403 and no-store;
// speaksForURL now takes that 403 as the origin's word about the URL, so
// notStored remembers the URL hit-for-pass (cache.pass_ttl) and
// revalidation removes the stored copy stale-if-error would serve.
//
// Steps: the origin serves /p with max-age=600 and answers any request
// with "User-Agent: sqlmap" 403 Cache-Control: no-store (ModSecurity,
// Cloudflare-style WAF in front of the origin); the attacker asks /p
// once; then three plain visitors ask /p.
// Expected: the first plain visitor's answer is stored and the next two
// are hits (one origin fetch for them), as at a48a43a.
// Got: every plain visitor goes to the origin (Cache-Status fwd=bypass,
// detail uncacheable) until pass_ttl, renewed by one attacker request per
// pass_ttl: the cache is off for the page. Why it matters: the attack
// the earlier fix was for, with a request every scanner sends.
func TestS34AWAFs403ToOneRequestDoesNotTurnTheCacheOffForEveryone(t *testing.T) {
	// 401 is left out: it keeps the URL passed (passesForURL), for APIs
	// that answer every anonymous request 401, which would otherwise queue
	// behind one another; a firewall answers 403.
	for _, status := range []int{403, 405} {
		t.Run(strconv.Itoa(status), func(t *testing.T) {
			var fetches atomic.Int32
			origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				fetches.Add(1)
				if r.Header.Get("User-Agent") == "sqlmap/1.8" {
					w.Header().Set("Cache-Control", "no-store")
					w.WriteHeader(status)
					_, _ = w.Write([]byte("blocked by the firewall"))
					return
				}
				w.Header().Set("Cache-Control", "max-age=600")
				_, _ = w.Write([]byte("the page"))
			}))
			t.Cleanup(origin.Close)
			h := proxyFor(t, origin.URL, nil)
			ask := func(ua string) *httptest.ResponseRecorder {
				r := httptest.NewRequest("GET", "http://shop.test/p", nil)
				r.Header.Set("User-Agent", ua)
				w := httptest.NewRecorder()
				h.ServeHTTP(w, r)
				h.Wait()
				return w
			}
			if w := ask("sqlmap/1.8"); w.Code != status {
				t.Fatalf("the attacker: %d, want %d", w.Code, status)
			}
			before := fetches.Load()
			var last *httptest.ResponseRecorder
			for range 3 {
				last = ask("Mozilla/5.0")
				if last.Code != http.StatusOK {
					t.Fatalf("a visitor: %d", last.Code)
				}
			}
			if got := fetches.Load() - before; got != 1 {
				t.Fatalf("three plain visitors after one firewall %d: %d origin fetches, want 1 (last Cache-Status %q): the URL passes the cache for everyone",
					status, got, last.Header().Get("Cache-Status"))
			}
		})
	}
}
