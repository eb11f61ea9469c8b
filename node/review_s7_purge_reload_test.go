package node

import (
	"strings"
	"testing"
)

// TestS7PurgeAfterASiteRenameIsNotUndoneByARollback: a purge by URL finds
// the site from the Host under the table in force, so the entry a page
// has under its previous site name is left in the store. A rename (or a
// host taken off a site) followed by a purge of the URL and a rollback of
// the config serves the purged page again, from the cache, without the
// origin being asked.
//
// What an operator requires: "purge url=X" removes every stored copy of
// X on this node (it reports purged:1 and the content is gone), whatever
// site name the copy was stored under; a rollback of a config must not
// resurrect content that was purged (a takedown, a leaked page).
//
// Failed before 2026-12-06; fixed: a reload removes what no site reaches (proxy.DropUnreachable).
func TestS7PurgeAfterASiteRenameIsNotUndoneByARollback(t *testing.T) {
	a := newS7Origin(t, "A")
	v1 := "sites:\n" + s7Site("shop", []string{"shop.test"}, []string{a.URL}, "")
	v2 := "sites:\n" + s7Site("store", []string{"shop.test"}, []string{a.URL}, "") // the same site, renamed
	n := startS7Node(t, v1)

	for range 2 {
		if code, body := n.get("shop.test", "/secret"); code != 200 || !strings.Contains(body, "origin=A") {
			t.Fatalf("v1: %d %q", code, body)
		}
	}
	n.Proxy().Wait()
	before := a.calls.Load()
	if code, body := n.get("shop.test", "/secret"); code != 200 || a.calls.Load() != before {
		t.Fatalf("v1: the page is not cached (%d %q, origin calls %d -> %d)", code, body, before, a.calls.Load())
	}

	if code, body := n.reload(v2); code != 200 {
		t.Fatalf("reload to v2: %d %s", code, body)
	}
	// The page is now taken down at the origin and purged at the edge.
	a.cc.Store("no-store")
	code, body := n.admin("POST", "/purge?url=http://shop.test/secret")
	t.Logf("purge under v2: %d %s", code, body)
	if code != 200 {
		t.Fatalf("purge: %d %s", code, body)
	}
	purgedNothing := strings.Contains(body, `"purged":0`)

	// Rollback to v1.
	if code, body := n.reload(v1); code != 200 {
		t.Fatalf("rollback to v1: %d %s", code, body)
	}
	before = a.calls.Load()
	code, body = n.get("shop.test", "/secret")
	if a.calls.Load() == before {
		t.Errorf("after purge url=http://shop.test/secret (answer purged:0=%v) and a config rollback, the node answered %d %q "+
			"from its cache without asking the origin: the purge missed the copy stored under the site's previous name "+
			"(key \"shop http://shop.test/secret\"); a purge by URL must remove every copy of the URL", purgedNothing, code, body)
	}
}

// TestS7ACopyOfARemovedSiteDoesNotComeBack: a host
// taken off every site (421) and purged, then given back (a rollback),
// serves the copy the purge said it did not find.
//
// Failed before 2026-12-06; fixed: a reload removes what no site reaches (proxy.DropUnreachable).
func TestS7ACopyOfARemovedSiteDoesNotComeBack(t *testing.T) {
	a := newS7Origin(t, "A")
	b := newS7Origin(t, "B")
	v1 := "sites:\n" + s7Site("shop", []string{"shop.test"}, []string{a.URL}, "") + s7Site("blog", []string{"blog.test"}, []string{b.URL}, "")
	v2 := "sites:\n" + s7Site("blog", []string{"blog.test"}, []string{b.URL}, "")
	n := startS7Node(t, v1)
	for range 2 {
		n.get("shop.test", "/leak")
	}
	n.Proxy().Wait()
	if code, body := n.reload(v2); code != 200 {
		t.Fatalf("reload: %d %s", code, body)
	}
	if code, _ := n.get("shop.test", "/leak"); code != 421 {
		t.Fatalf("shop.test after its site was removed: %d, want 421", code)
	}
	_, pb := n.admin("POST", "/purge?url=http://shop.test/leak")
	_, pp := n.admin("POST", "/purge?prefix=http://shop.test/")
	t.Logf("purge url: %s; purge prefix: %s", pb, pp)
	a.cc.Store("no-store")
	if code, body := n.reload(v1); code != 200 {
		t.Fatalf("rollback: %d %s", code, body)
	}
	before := a.calls.Load()
	code, body := n.get("shop.test", "/leak")
	if a.calls.Load() == before {
		t.Errorf("purged by url and by prefix while no site served shop.test (answers %s, %s), the page came back from the cache "+
			"when the site did: %d %q", strings.TrimSpace(pb), strings.TrimSpace(pp), code, body)
	}
}
