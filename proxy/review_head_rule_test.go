package proxy

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

// TestHeadRulesAgreeWithServeHTTP: a HEAD that ServeHTTP sends to the
// origin because of a rule is never answered from the store by AppendHit
// (the client loops and the peer loop share it). Rules may match HEAD
// alone: bypass comes from the request's rule, the key from the key rule
// (a GET's), as ServeHTTP finds them. Both cases were found by reviews.
func TestHeadRulesAgreeWithServeHTTP(t *testing.T) {
	for _, tc := range []struct {
		name, rules, query string
	}{
		{"bypass for HEAD alone", `
- name: head-bypass
  match: {path: "/x", methods: [HEAD]}
  bypass: true
`, ""},
		{"a HEAD-only rule does not shape the key", `
- name: head-key
  match: {path: "/x", methods: [HEAD]}
  key: {ignore_params: ["*"]}
`, "v=2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			site := ruleSite(t, tc.rules)
			p := newRuleProxy(t, site, func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Cache-Control", "max-age=600")
				_, _ = w.Write([]byte("page " + r.URL.RawQuery))
			}, nil)
			p.get("/x") // stored under /x
			var a HitAnswer
			hit := p.h.AppendHit(nil, &HitRequest{Head: true, Host: "shop.test", Path: "/x", RawQuery: tc.query, Site: site}, []byte("Date: x\r\n"), &a)
			if hit {
				p.h.ReleaseHit(a.Pinned, a.ClientIP)
			}
			target := "http://shop.test/x"
			if tc.query != "" {
				target += "?" + tc.query
			}
			before := p.calls.Load()
			p.h.ServeInbound(httptest.NewRecorder(), httptest.NewRequest("HEAD", target, nil), Inbound{Site: site})
			p.h.Wait()
			if viaServe := p.calls.Load() - before; viaServe == 1 && hit {
				t.Errorf("ServeHTTP asks the origin for HEAD %s; AppendHit answers it from the store:\n%s", target, a.Head)
			}
		})
	}
}
