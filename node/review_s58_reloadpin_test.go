package node

import (
	"runtime"
	"strconv"
	"testing"
	"weak"

	"github.com/edgecache/edge/proxy"
)

// TestS58ReloadedSiteTableIsNotPinnedByThePurgeLog: cc3a2b2 freezes the
// site table a reload's DropUnreachable judges by (n.siteTableNames
// returns the table's method value nameOf) inside the purge record it
// begins. The purge log keeps its last 1,024 records, so every table a
// reload put in force stays reachable, with its pools' clients, its rate
// limiters' buckets and its rule sets, until 1,024 more purges of any kind
// have come: on a node that reloads more often than it purges, the last
// 1,024 configurations' tables are all kept. Before the change the record
// held n.siteName, which pins nothing. Expected: a table no longer in
// force (and with no request on it) is collectable.
func TestS58ReloadedSiteTableIsNotPinnedByThePurgeLog(t *testing.T) {
	o := newS7Origin(t, "A")
	v1 := "sites:\n" + s7Site("shop", []string{"shop.test"}, []string{o.URL}, "")
	v2 := "sites:\n" + s7Site("shop", []string{"shop.test", "www.shop.test"}, []string{o.URL}, "")
	n := startS7Node(t, v1)
	if code, body := n.reload(v2); code != 200 {
		t.Fatalf("reload: %d %s", code, body)
	}
	// The table of v2, put in force by that reload (its record names it).
	wp := weak.Make(n.sites.Load())
	if code, body := n.reload(v1); code != 200 {
		t.Fatalf("reload back: %d %s", code, body)
	}
	collected := func() bool {
		for range 5 {
			runtime.GC()
		}
		return wp.Value() == nil
	}
	if collected() {
		return
	}
	// Whether the purge log is what holds it: 1,024 purges push the
	// reload's record out.
	for i := range 1024 {
		if _, err := n.Proxy().Purge(proxy.PurgeRequest{URL: "http://shop.test/x" + strconv.Itoa(i)}); err != nil {
			t.Fatal(err)
		}
	}
	t.Errorf("the site table of a configuration no longer in force is still reachable after two reloads; after 1,024 purges collectable: %v (the reload's purge record holds it)",
		collected())
}
