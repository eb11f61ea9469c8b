package node

import "testing"

// TestS58ReAddedSiteRulesCountAgain pins what cc3a2b2's retirement must
// not take with it: a site removed by one reload (its rules retired, its
// series deleted) and re-added by the next counts under its new rules
// again, on the miss path (countRule, the origin counter) and on the hit
// path (ruleMetrics.hit's Slot).
func TestS58ReAddedSiteRulesCountAgain(t *testing.T) {
	o := newS7Origin(t, "A")
	rule := "    rules:\n      - name: pages\n        match: {path: '/*'}\n        ttl: 1m\n"
	shop := s7Site("shop", []string{"shop.test"}, []string{o.URL}, "")
	v1 := "sites:\n" + shop + s7Site("gone", []string{"gone.test"}, []string{o.URL}, rule)
	v2 := "sites:\n" + shop
	n := startS7Node(t, v1)
	for range 2 {
		if code, _ := n.get("gone.test", "/p"); code != 200 {
			t.Fatalf("gone.test/p: %d", code)
		}
	}
	if got := n.Proxy().RuleRequests("gone", "pages"); got["hit"] == 0 || got["miss"] == 0 {
		t.Fatalf("before the reloads: %v", got)
	}
	if code, body := n.reload(v2); code != 200 {
		t.Fatalf("reload removing gone: %d %s", code, body)
	}
	if got := n.Proxy().RuleRequests("gone", "pages"); got["hit"]+got["miss"]+got["upstream"] != 0 {
		t.Fatalf("after the removal: %v, want none", got)
	}
	if code, body := n.reload(v1); code != 200 {
		t.Fatalf("reload re-adding gone: %d %s", code, body)
	}
	for _, path := range []string{"/q", "/q"} {
		if code, _ := n.get("gone.test", path); code != 200 {
			t.Fatalf("gone.test%s: %d", path, code)
		}
	}
	got := n.Proxy().RuleRequests("gone", "pages")
	if got["miss"] != 1 || got["hit"] != 1 || got["upstream"] != 1 {
		t.Errorf("the re-added site's rule counted %v, want a miss, a hit and an upstream request", got)
	}
}
