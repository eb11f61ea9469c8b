package cluster

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/edgecache/edge/proxy"
	"github.com/edgecache/edge/routing"
)

// A review's: a peer that refuses A's signature (another secret: a key
// rotation half done) answers an unsigned 403, which A reads as no
// answer: the purge is owed, and delivered once the secrets agree.
func TestAPurgeRefusedByAnotherKeyIsOwed(t *testing.T) {
	nodes := startRealNodes(t, []string{"A", "B"}, routing.ModeHybrid, 2, 100*time.Millisecond, &slowOrigin{})
	a, b := nodes["A"], nodes["B"]
	fillAt(t, b, "/k/1")
	good := b.c.peerAuth
	b.c.peerAuth = newVerifier([]byte("another secret, long enough to be one"), b.c.cfg.NodeID)
	_, fan, _ := a.c.Purge(context.Background(), proxy.PurgeRequest{URL: "http://site.example/k/1"}, a.ph.Purge)
	if fan.Owed != 1 {
		t.Fatalf("purge refused by B's key: %+v", fan)
	}
	b.c.peerAuth = good
	redeliverNow(t, a)
	if storedAt(b, "/k/1") {
		t.Error("not delivered once the keys agree")
	}
}

// A review's: fan-outs, redeliveries, the status page, forgetting and the
// gauge at once (-race: no race, no deadlock between c.mu and owed.mu),
// and the gauge equals the lists' sum.
func TestOwedPurgesRaceNothing(t *testing.T) {
	nodes := startRealNodes(t, []string{"A", "B", "C"}, routing.ModeHybrid, 2, 20*time.Millisecond, &slowOrigin{})
	a := nodes["A"]
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := 0; ctx.Err() == nil; i++ {
				_, _, _ = a.c.Purge(context.Background(), proxy.PurgeRequest{URL: fmt.Sprintf("http://site.example/c/%d/%d", w, i)}, a.ph.Purge)
			}
		})
	}
	wg.Go(func() {
		for ctx.Err() == nil {
			a.c.mu.Lock()
			id := []string{"B", "C"}[rand.IntN(2)]
			if p := a.c.peers[id]; p != nil {
				a.c.setTrust(p, !p.trusted)
			}
			a.c.mu.Unlock()
			a.c.redeliverPurges(ctx, time.Now())
			_ = a.c.Peers()
			a.c.forgetDeparted(time.Now())
			_ = a.c.owed.count()
			time.Sleep(time.Millisecond)
		}
	})
	wg.Wait()
	time.Sleep(200 * time.Millisecond)
	a.c.owed.mu.Lock()
	sum := 0
	for _, l := range a.c.owed.byPeer {
		sum += len(l.purges)
	}
	total := a.c.owed.total
	a.c.owed.mu.Unlock()
	if sum != total {
		t.Errorf("edge_purge_owed %d, lists hold %d", total, sum)
	}
}
