package proxy

import (
	"net/http"
	"testing"
)

// TestS64RuleSetForwardedProtoReachesTheOrigin: an edge behind a TLS
// terminator that writes no fields (an L4 balancer: AWS NLB's TLS
// listener, HAProxy in tcp mode) cannot name it in
// forwarding.trusted_proxies to any effect, so the operator tells the
// force-https origin the visitor's scheme with a rule, as nginx's
// proxy_set_header X-Forwarded-Proto https does: request_headers: {set:
// {X-Forwarded-Proto: https}} (rules.parse accepts it; docs/rules.md:
// "edit what the origin receives"). Until review s62's change
// forwardHeader wrote X-Forwarded-Proto only when the request had none,
// so the rule's value reached the origin. Now a value that differs from
// Handler.scheme (which does not read a rule's edit for an untrusted
// client) is replaced: the origin is told http, answers every page with
// its redirect to https, and the visitor, already on https at the
// balancer, is sent round the loop for good. The configuration loads
// without a word.
//
// Expected: the rule's edit reaches the origin as before (and the edge
// keys by it), or the configuration is refused at load, pointing at the
// field the edge now owns.
func TestS64RuleSetForwardedProtoReachesTheOrigin(t *testing.T) {
	site := ruleSite(t, `[{name: pages, request_headers: {set: {X-Forwarded-Proto: https}}}]`)
	p := newRuleProxy(t, site, func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Forwarded-Proto") != "https" {
			http.Redirect(w, r, "https://shop.test"+r.URL.RequestURI(), http.StatusMovedPermanently)
			return
		}
		_, _ = w.Write([]byte("the page"))
	}, nil)
	w := p.get("/p")
	got := p.last.Load()
	if got == nil {
		t.Fatal("the origin saw no request")
	}
	if v := got.Header.Values("X-Forwarded-Proto"); len(v) != 1 || v[0] != "https" {
		t.Errorf("the rule sets X-Forwarded-Proto: https; the origin saw %q and answered %d (Location %q): "+
			"forwardHeader replaced the operator's edit with the connection's scheme", v, w.Code, w.Header().Get("Location"))
	}
}
