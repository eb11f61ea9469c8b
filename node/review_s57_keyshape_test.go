package node

import (
	"strings"
	"testing"
)

// TestS57PurgeAfterAKeyRuleChangeIsUndoneByARollback: a reload that adds
// key.ignore_params to a site keeps the entries stored under the old key
// shape (docs/rules.md: "A reload purges nothing a site of the new
// configuration can still reach"; these it cannot reach). A purge by URL
// then names the URL's key under the new shape only, reports nothing
// found, and leaves the old copy; rolling the reload back serves the
// purged page again from the cache, the undoing docs/operations.md
// ("Entries never mix") rules out for a renamed site. Spec question: the
// rename case was fixed by removing what the new table cannot reach;
// entries under a key shape the new rules can no longer produce are the
// same kind of unreachable.
//
// Kept as documented (docs/rules.md, after a reload): a URL purge names
// the URL as the rules in force key it, so after a change of a key rule
// the operator purges by prefix (or tag), which names every key of the
// path whatever its shape. This test holds that such a purge survives
// the rollback.
func TestS57PurgeAfterAKeyRuleChangeIsUndoneByARollback(t *testing.T) {
	a := newS7Origin(t, "A")
	v1 := "sites:\n" + s7Site("shop", []string{"shop.test"}, []string{a.URL}, "")
	v2 := "sites:\n" + s7Site("shop", []string{"shop.test"}, []string{a.URL},
		"    rules:\n      - name: campaigns\n        match: {path: '/*'}\n        key: {ignore_params: [utm_*]}\n")
	n := startS7Node(t, v1)
	const page = "/secret?id=1&utm_source=mail"
	for range 2 {
		n.get("shop.test", page)
	}
	n.Proxy().Wait()
	before := a.calls.Load()
	if _, body := n.get("shop.test", page); a.calls.Load() != before {
		t.Fatalf("v1 did not cache %s (%q)", page, body)
	}
	if code, body := n.reload(v2); code != 200 {
		t.Fatalf("reload adding ignore_params: %d %s", code, body)
	}
	// Taken down at the origin, and purged at the edge by its path.
	a.cc.Store("no-store")
	code, pb := n.admin("POST", "/purge?prefix=http://shop.test/secret")
	if code != 200 {
		t.Fatalf("purge: %d %s", code, pb)
	}
	if code, body := n.reload(v1); code != 200 {
		t.Fatalf("rollback: %d %s", code, body)
	}
	before = a.calls.Load()
	code, body := n.get("shop.test", page)
	if a.calls.Load() == before {
		t.Errorf("after purge prefix=http://shop.test/secret of %s (answer %s) and rolling back the key rule, the node answered %d %q from its cache",
			page, strings.TrimSpace(pb), code, body)
	}
}
