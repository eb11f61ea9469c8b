package proxy

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

// A rule for HEAD alone (methods: [HEAD], bypass) is found by ServeHTTP
// for a HEAD; AppendHit looks rules up as GET for HEAD too, misses it and
// answers the HEAD from the store. Shared by the client loop and (new)
// the peer loop.
func TestReviewHeadOnlyBypassRule(t *testing.T) {
	site := ruleSite(t, `
- name: head-bypass
  match: {path: "/x", methods: [HEAD]}
  bypass: true
`)
	p := newRuleProxy(t, site, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=600")
		_, _ = w.Write([]byte("page"))
	}, nil)
	p.get("/x")
	r := httptest.NewRequest("HEAD", "http://shop.test/x", nil)
	before := p.calls.Load()
	p.h.ServeInbound(httptest.NewRecorder(), r, Inbound{Site: site})
	p.h.Wait()
	viaServe := p.calls.Load() - before
	var a HitAnswer
	hit := p.h.AppendHit(nil, &HitRequest{Head: true, Host: "shop.test", Path: "/x", Site: site}, []byte("Date: x\r\n"), &a)
	if hit {
		p.h.ReleaseHit(a.Pinned, a.ClientIP)
	}
	if viaServe == 1 && hit {
		t.Errorf("ServeHTTP bypasses the store for HEAD (origin asked), AppendHit answers it from the store")
	}
}
