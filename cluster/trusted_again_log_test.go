package cluster

import (
	"strings"
	"testing"
	"time"
)

// TestATrustedAgainPeerIsLogged: a suspicion is logged as a warning, and
// the heartbeat that ends it is logged too. Without the second line a log
// read as if a suspected peer stayed down (an operator's walk-through of
// `make run` on a busy machine: two "peer suspected" lines, every peer up
// on the metrics, nothing in the log to say so).
func TestATrustedAgainPeerIsLogged(t *testing.T) {
	virtualTime(t, func(t *testing.T) {
		ids, _, nodes := startGossipNodes(t, "l", 2, 1, func(c *Config) { c.Monitoring = MonitorAll })
		defer stopAll(nodes)
		eventually(t, 30*time.Second, "the two trust each other", allTrust(nodes, ids))
		a := nodes["l00"]
		a.c.mu.Lock()
		a.c.setTrust(a.c.peers["l01"], false) // as a false suspicion does
		a.c.mu.Unlock()
		a.c.setView()
		eventually(t, 10*time.Second, "l00 logs l01 trusted again", func() bool {
			for _, line := range strings.Split(a.log.String(), "\n") {
				if strings.Contains(line, `msg="peer trusted again"`) && strings.Contains(line, "peer=l01") && strings.Contains(line, "suspected_for=") {
					return true
				}
			}
			return false
		})
	})
}
