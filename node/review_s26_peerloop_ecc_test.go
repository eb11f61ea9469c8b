package node

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

func s26Counter(t *testing.T, n *Node, name string) float64 {
	t.Helper()
	mfs, err := n.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			s := 0.0
			for _, m := range mf.GetMetric() {
				s += m.GetCounter().GetValue()
			}
			return s
		}
	}
	return 0
}

// HOLDS: on two real nodes (hit paths on, the cluster listener's read
// loop answering peers' fresh hits), a page the origin gives an hour by
// Cache-Control and 1 s by Edge-Cache-Control lives 1 s at the ingress
// too, its copy taken from the home's loop (peerFields), and no client of
// either node, on the hit path or through serve, sees Edge-Cache-Control.
func TestS26PeerLoopCarriesEdgeCacheControlAndClientsNever(t *testing.T) {
	var mu sync.Mutex
	versions := map[string]int{}
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		versions[r.URL.Path]++
		v := versions[r.URL.Path]
		mu.Unlock()
		w.Header().Set("Cache-Control", "max-age=3600")
		w.Header().Set("Edge-Cache-Control", "max-age=1")
		_, _ = fmt.Fprintf(w, "version %d", v)
	}))
	t.Cleanup(origin.Close)
	clA, clB := freeAddr(t), freeAddr(t)
	start := func(id, cl string) *Node {
		n, _ := runNodeYAML(t, "node_id: "+id+"\nlisten: '"+freeAddr(t)+"'\nadmin: {listen: '"+freeAddr(t)+"'}\n"+
			"origin: {url: '"+origin.URL+"'}\n"+
			"cluster: {listen: '"+cl+"', peers: 'a="+clA+",b="+clB+"', secret: 'a-test-cluster-secret', heartbeat_period: 50ms}\n")
		return n
	}
	a, b := start("a", clA), start("b", clB)
	deadline := time.Now().Add(10 * time.Second)
	for ok := false; !ok; time.Sleep(20 * time.Millisecond) {
		ok = true
		for _, n := range []*Node{a, b} {
			ps := n.cluster.Peers()
			ok = ok && len(ps) == 1 && ps[0].Trusted
		}
		if !ok && time.Now().After(deadline) {
			t.Fatal("peers not trusted in 10 s")
		}
	}
	ask := func(n *Node, path string) (string, string) {
		resp, body := rawAsk(t, n.PublicAddr(), "GET "+path+" HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
		if v := resp.Header.Get("Edge-Cache-Control"); v != "" {
			t.Errorf("a client of %s got Edge-Cache-Control %q for %s (Cache-Status %q)", n.cfg.NodeID, v, path, resp.Header.Get("Cache-Status"))
		}
		return body, resp.Header.Get("Cache-Status")
	}
	var fromB []string
	for i := 0; len(fromB) < 3 && i < 60; i++ {
		path := fmt.Sprintf("/s26/%d", i)
		ask(b, path)
		ask(b, path)
		ask(b, path) // b's own hit path
		for range 3 {
			_, status := ask(a, path)
			if strings.Count(status, ";") > 0 && strings.Contains(status, "b;") && !strings.Contains(fmt.Sprint(fromB), path) {
				fromB = append(fromB, path)
			}
		}
	}
	loop := s26Counter(t, b, "edge_peer_loop_hits_total")
	t.Logf("pages a took from b: %v; b's loop answered %v", fromB, loop)
	if len(fromB) == 0 || loop == 0 {
		t.Skip("no page came from b's read loop: nothing to check")
	}
	time.Sleep(2100 * time.Millisecond)
	for _, path := range fromB {
		if got, status := ask(a, path); got == "version 1" {
			t.Errorf("%s at a 2 s after Edge-Cache-Control: max-age=1: %q (Cache-Status %q): a's copy from b's loop lived by Cache-Control", path, got, status)
		}
	}
}
