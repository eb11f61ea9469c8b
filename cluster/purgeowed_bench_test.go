package cluster

import (
	"fmt"
	"testing"
	"time"

	"github.com/edgecache/edge/proxy"
)

// A third review's, a cost: owed.any, which lets candidates (every
// miss) and setView skip owed.mu, is true for a day after any departed
// peer is forgotten as long as purges come (each purge is owed to the
// tracked id): then every miss takes owed.mu once per peer, under c.mu.
func BenchmarkCandidatesWhileAForgottenIdIsOwed(b *testing.B) {
	peers := map[string]string{}
	for i := range 32 {
		peers[fmt.Sprintf("p%d", i)] = fmt.Sprintf("127.0.0.1:%d", 1000+i)
	}
	for _, owed := range []bool{false, true} {
		b.Run(fmt.Sprintf("forgotten_owed=%v", owed), func(b *testing.B) {
			c := newTestCluster(b, "hybrid", peers)
			c.mu.Lock()
			for _, p := range c.peers {
				p.trusted, p.member = true, true
			}
			c.mu.Unlock()
			if owed {
				c.owed.forgot("gone", time.Now())
				c.owed.owe("gone", proxy.PurgeRequest{URL: "http://site.example/x"}, "", nil, c.metrics)
			}
			path := []hop{{"p1", 2}}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				_ = c.candidates("k", "s", path, false)
			}
		})
	}
}
