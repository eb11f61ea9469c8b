package node

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestS7RollingReloadMovingAHostNeverServesTheOldSitesPages: in a
// cluster, a reload reaches nodes one after another (a rolling config
// push). Node a is reloaded first: host x.test moves from site "old"
// (origin O1) to site "new" (origin O2). Its misses for x.test are keyed
// "new http://x.test/…", but the peer request carries only the URL and
// Host: node b, still on the old config, resolves x.test to "old" and
// answers O1's stored page, which a serves as site "new"'s page and keeps.
// Once b is reloaded too, both nodes still serve O1's pages for x.test
// from the store, for as long as they stay fresh.
//
// docs/operations.md: "a reload that moves a host to another site cannot
// serve the old site's pages". What an operator needs: the peer must
// answer only for the key the asking node asked for (the site name
// travels with the peer request, and a peer whose table gives another
// site does not answer from its store for it).
//
// Failed before 2026-12-06; fixed: peer requests carry the signed Edge-Site, and a peer under another site refuses.
func TestS7RollingReloadMovingAHostNeverServesTheOldSitesPages(t *testing.T) {
	if testing.Short() {
		t.Skip("starts two clustered nodes")
	}
	o1 := newS7Origin(t, "O1")
	o2 := newS7Origin(t, "O2")
	clA, clB := freeAddr(t), freeAddr(t)
	v1 := "sites:\n" + s7Site("old", []string{"x.test"}, []string{o1.URL}, "")
	v2 := "sites:\n" + s7Site("new", []string{"x.test"}, []string{o2.URL}, "")
	clusterYAML := func(id, cl string) string {
		return "node_id: " + id + "\ncluster: {listen: '" + cl + "', peers: 'a=" + clA + ",b=" + clB + "', secret: 'a-test-cluster-secret', heartbeat_period: 50ms}\n"
	}
	start := func(id, cl string) *s7Node {
		s := &s7Node{file: t.TempDir() + "/edge.yaml", pub: freeAddr(t), adm: freeAddr(t), t: t}
		head := clusterYAML(id, cl)
		s.writeRaw(head + v1)
		s.run()
		return s
	}
	a, b := start("a", clA), start("b", clB)
	// Wait until both know each other.
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if len(a.cluster.Peers()) >= 1 && len(b.cluster.Peers()) >= 1 {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(500 * time.Millisecond)
	const pages = 40
	for i := range pages {
		for range 2 {
			for _, n := range []*s7Node{a, b} {
				if code, body := n.get("x.test", fmt.Sprintf("/p/%d", i)); code != 200 || !strings.Contains(body, "origin=O1") {
					t.Fatalf("v1 fill: %d %q", code, body)
				}
			}
		}
	}
	a.Proxy().Wait()
	b.Proxy().Wait()

	// Rolling reload: a first.
	a.writeRaw(clusterYAML("a", clA) + v2)
	if code, body := a.admin("POST", "/reload"); code != http.StatusOK {
		t.Fatalf("reload a: %d %s", code, body)
	}
	wrong := 0
	for i := range pages {
		for range 2 {
			if _, body := a.get("x.test", fmt.Sprintf("/p/%d", i)); strings.Contains(body, "origin=O1") {
				wrong++
			}
		}
	}
	a.Proxy().Wait()
	// Then b.
	b.writeRaw(clusterYAML("b", clB) + v2)
	if code, body := b.admin("POST", "/reload"); code != http.StatusOK {
		t.Fatalf("reload b: %d %s", code, body)
	}
	after := 0
	var sample string
	for i := range pages {
		for _, n := range []*s7Node{a, b} {
			if _, body := n.get("x.test", fmt.Sprintf("/p/%d", i)); strings.Contains(body, "origin=O1") {
				after++
				sample = body
			}
		}
	}
	if wrong > 0 || after > 0 {
		t.Errorf("x.test moved from site old (O1) to site new (O2): during the rolling reload node a answered %d of %d requests with "+
			"site old's pages (from peer b, still on the old config); after both nodes reloaded, %d of %d requests still got them (e.g. %q). "+
			"A node on its own serves none of them (TestS7ReloadKeepsOldEntries... keys differ per site)", wrong, 2*pages, after, 2*pages, sample)
	}
}

// writeRaw writes a whole config (listen and admin added).
func (s *s7Node) writeRaw(body string) { s.write(body) }
