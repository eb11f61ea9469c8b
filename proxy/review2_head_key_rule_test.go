package proxy

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

// 05e60b3 looks a HEAD's rule up as HEAD in AppendHit and then keys the
// request with that rule. ServeHTTP keys every request with ForKey(path)
// (the first GET-matching rule without a cookie condition), whatever the
// method. A HEAD-only rule that shapes the key (ignore_params) thus gives
// AppendHit another key than ServeHTTP: the hit path answers a HEAD of
// /x?v=2 from /x's entry while ServeHTTP goes to the origin.
func TestReview2HeadOnlyKeyRule(t *testing.T) {
	site := ruleSite(t, `
- name: head-key
  match: {path: "/x", methods: [HEAD]}
  key: {ignore_params: ["*"]}
`)
	p := newRuleProxy(t, site, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=600")
		w.Header().Set("X-Query", r.URL.RawQuery)
		_, _ = w.Write([]byte("page " + r.URL.RawQuery))
	}, nil)
	p.get("/x") // stored under /x (GET: no rule shapes its key)

	var a HitAnswer
	hit := p.h.AppendHit(nil, &HitRequest{Head: true, Host: "shop.test", Path: "/x", RawQuery: "v=2", Site: site}, []byte("Date: x\r\n"), &a)
	if hit {
		p.h.ReleaseHit(a.Pinned, a.ClientIP)
	}
	r := httptest.NewRequest("HEAD", "http://shop.test/x?v=2", nil)
	before := p.calls.Load()
	w := httptest.NewRecorder()
	p.h.ServeInbound(w, r, Inbound{Site: site})
	p.h.Wait()
	viaServe := p.calls.Load() - before

	t.Logf("viaServe=%d hit=%v cs=%q", viaServe, hit, w.Header().Get("Cache-Status"))
	if viaServe == 1 && hit {
		t.Errorf("ServeHTTP asks the origin for HEAD /x?v=2 (X-Query %q); AppendHit answers it from /x's entry:\n%s",
			w.Header().Get("X-Query"), a.Head)
	}
}
