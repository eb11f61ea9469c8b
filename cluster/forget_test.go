package cluster

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// seriesOf counts the series in reg labelled peer=id.
func seriesOf(t *testing.T, reg *prometheus.Registry, id string) int {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, f := range families {
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "peer" && l.GetValue() == id {
					n++
				}
			}
		}
	}
	return n
}

// TestDepartedPeersAreForgotten: a peer learnt through membership that
// dies is kept (as no member) for ForgetDepartedAfter, then forgotten with
// its metric series; a configured peer that dies is kept for good; the
// forgotten one, restarted, is learnt again.
func TestDepartedPeersAreForgotten(t *testing.T) {
	virtualTime(t, func(t *testing.T) {
		const forget = 5 * time.Second
		opts := func(c *Config) { c.Monitoring, c.ForgetDepartedAfter = MonitorAll, forget }
		seedConn := listenUDP(t, "127.0.0.1:0")
		seed := map[string]string{"f00": seedConn.LocalAddr().String()}
		nodes := map[string]*gossipNode{"f00": startGossipNode(t, "f00", seed, seedConn, 2, opts)}
		nodes["f01"] = startGossipNode(t, "f01", seed, listenUDP(t, "127.0.0.1:0"), 2, opts)
		nodes["f02"] = startGossipNode(t, "f02", seed, listenUDP(t, "127.0.0.1:0"), 2, opts)
		defer stopAll(nodes)
		ids := []string{"f00", "f01", "f02"}
		eventually(t, 30*time.Second, "every node trusts every other", allTrust(nodes, ids))
		watcher := nodes["f01"]
		if n := seriesOf(t, watcher.reg, "f02"); n == 0 {
			t.Fatal("no series for a live peer learnt through membership")
		}

		addr := nodes["f02"].addr
		nodes["f02"].crash()
		delete(nodes, "f02")
		nodes["f00"].crash() // configured at f01: kept
		delete(nodes, "f00")
		eventually(t, 30*time.Second, "f01 takes both out of the membership", func() bool {
			return !watcher.member("f02") && !watcher.member("f00")
		})
		watcher.c.mu.Lock()
		left := watcher.c.peers["f02"].leftAt
		watcher.c.mu.Unlock()
		eventually(t, forget+30*time.Second, "f01 forgets f02", func() bool {
			watcher.c.mu.Lock()
			defer watcher.c.mu.Unlock()
			return watcher.c.peers["f02"] == nil
		})
		if took := time.Since(left); took < forget {
			t.Errorf("f02 forgotten %v after it left, want at least %v", took, forget)
		}
		if n := seriesOf(t, watcher.reg, "f02"); n != 0 {
			t.Errorf("%d series still labelled with the forgotten peer", n)
		}
		time.Sleep(2 * forget)
		watcher.c.mu.Lock()
		kept := watcher.c.peers["f00"]
		watcher.c.mu.Unlock()
		if kept == nil {
			t.Fatal("the configured peer was forgotten")
		}
		if n := seriesOf(t, watcher.reg, "f00"); n == 0 {
			t.Error("the configured peer's series went")
		}
		var listed bool
		for _, p := range watcher.c.Peers() {
			listed = listed || p.ID == "f00" && !p.Member
			if p.ID == "f02" {
				t.Error("the status page still lists the forgotten peer")
			}
		}
		if !listed {
			t.Error("the status page does not list the configured peer as down")
		}

		// Restarted through f01 (the seed is gone), f02 is learnt again.
		nodes["f02"] = startGossipNode(t, "f02", map[string]string{"f01": watcher.addr}, listenUDP(t, addr), 2, opts)
		eventually(t, 30*time.Second, "f01 trusts the restarted f02", func() bool { return watcher.member("f02") && watcher.trusts("f02") })
		if n := seriesOf(t, watcher.reg, "f02"); n == 0 {
			t.Error("no series for the peer learnt again")
		}
	})
}
