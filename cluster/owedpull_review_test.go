package cluster

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/edgecache/edge/proxy"
	"github.com/edgecache/edge/routing"
)

// A review's: every node that took a purge owes it to the node that was
// away, so at that node's start several peers deliver the same purge at
// once. The second to arrive while the first still ran got 503 "purge
// running": its deliver() stops at that purge, and the purges after it
// in its list are not delivered before the node serves, though the peer
// answered at once. Here A owes B [p1], C owes B [p1, p2] (A was away
// for p2 too: a rolling restart); B's purge of p1 takes 300 ms (a prefix
// over a disk) and C is 50 ms farther than A.
func TestAPurgeOwedByTwoPeersDoesNotStopTheOtherPurgesOneOwes(t *testing.T) {
	nodes := startRealNodes(t, []string{"A", "B", "C"}, routing.ModeHybrid, 2, 100*time.Millisecond, &slowOrigin{})
	a, b, c := nodes["A"], nodes["B"], nodes["C"]
	fillAt(t, b, "/pull/p1")
	fillAt(t, b, "/pull/p2")
	setTrusted(a, "B", false)
	setTrusted(c, "B", false)
	if _, fan, err := a.c.Purge(context.Background(), proxy.PurgeRequest{URL: "http://site.example/pull/p1"}, a.ph.Purge); err != nil || fan.Owed != 1 {
		t.Fatalf("p1: %+v %v", fan, err)
	}
	setTrusted(c, "A", false) // A away for p2
	if _, fan, err := c.c.Purge(context.Background(), proxy.PurgeRequest{URL: "http://site.example/pull/p2"}, c.ph.Purge); err != nil || fan.Owed != 2 {
		t.Fatalf("p2: %+v %v", fan, err)
	}
	if na, nc := a.c.owed.owedTo("B"), c.c.owed.owedTo("B"); na != 1 || nc != 2 {
		t.Fatalf("A owes B %d, C owes B %d; want 1 and 2", na, nc)
	}
	// B's peer listener: its purge of p1 is slow; C's requests come 50 ms later.
	h := b.c.PeerHandler(b.ph.ServeInbound, func(p proxy.PurgeRequest) (int, error) {
		if strings.HasSuffix(p.URL, "/p1") {
			time.Sleep(300 * time.Millisecond)
		}
		return b.ph.Purge(p)
	})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get(hdrNode) == "C" {
			time.Sleep(50 * time.Millisecond)
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	for _, m := range []*realNode{a, c} {
		m.c.mu.Lock()
		m.c.peers["B"].Addr = strings.TrimPrefix(srv.URL, "http://")
		m.c.mu.Unlock()
	}
	sum := b.c.CollectOwed(context.Background())
	t.Logf("B's asking: %+v; C still owes B %d", sum, c.c.owed.owedTo("B"))
	if sum.Outcomes[pullFailed] != 0 || sum.Outcomes[pullDelivered] != 2 {
		t.Errorf("B's asking: %+v, want A and C delivering", sum)
	}
	if storedAt(b, "/pull/p2") {
		t.Errorf("B serves /pull/p2 after its start's asking: C owed it p2, answered, and did not deliver it")
	}
}

// A review's (1b): the commit's own scenario (A and C both owe B one purge),
// with B's purge taking 20 ms (a disk tier's unlink, a loaded machine):
// the two deliveries collide and one is counted failed, its list kept
// owed and put a retry delay away, though B took the purge.
func TestTwoPeersDeliveringTheSamePurgeAtAStartBothComplete(t *testing.T) {
	nodes := startRealNodes(t, []string{"A", "B", "C"}, routing.ModeHybrid, 2, 100*time.Millisecond, &slowOrigin{})
	a, b := nodes["A"], nodes["B"]
	fillAt(t, b, "/pull/1")
	setTrusted(a, "B", false)
	setTrusted(nodes["C"], "B", false)
	if _, fan, err := a.c.Purge(context.Background(), proxy.PurgeRequest{URL: "http://site.example/pull/1"}, a.ph.Purge); err != nil || fan.Owed != 1 {
		t.Fatalf("purge with B down: %+v, %v", fan, err)
	}
	hookPurge(t, nodes, "B", func(proxy.PurgeRequest) { time.Sleep(20 * time.Millisecond) })
	sum := b.c.CollectOwed(context.Background())
	if sum.Outcomes[pullFailed] != 0 {
		t.Errorf("B's asking: %+v; C still owes B %d: a purge B took counted failed and kept owed", sum, nodes["C"].c.owed.owedTo("B")+a.c.owed.owedTo("B"))
	}
}

// A peer that accepts the connection and never answers costs a start the
// bound, no more (a closed one costs a refused connection).
func TestASilentPeerCostsAStartTheBound(t *testing.T) {
	nodes := startRealNodes(t, []string{"A", "B"}, routing.ModeHybrid, 2, 100*time.Millisecond, &slowOrigin{})
	b := nodes["B"]
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	b.c.mu.Lock()
	b.c.addPeer("D", ln.Addr().String())
	b.c.mu.Unlock()
	start := time.Now()
	sum := b.c.CollectOwed(context.Background())
	t.Logf("%+v in %v (bound %v)", sum, time.Since(start), pullBound(b.c.cfg.PeerTimeout))
	if time.Since(start) > pullBound(b.c.cfg.PeerTimeout)+time.Second {
		t.Error("past the bound")
	}
}
