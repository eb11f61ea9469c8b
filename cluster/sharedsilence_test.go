package cluster

import (
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// suspicionsBy sums node nd's suspicions of every peer in ids.
func suspicionsBy(nd *gossipNode, ids []string) float64 {
	total := 0.0
	for _, id := range ids {
		total += testutil.ToFloat64(nd.c.metrics.Suspicions.WithLabelValues(id))
	}
	return total
}

// spikeNetwork delays every datagram on every link by 300 ms for 1 s, three
// times, 4 s apart (the fault lab's spikes-300), and returns the
// suspicions every node made meanwhile.
func spikeNetwork(t *testing.T, hold bool) (suspicions, held float64) {
	var ids []string
	var nodes map[string]*gossipNode
	network := networkOf(t)
	ids, _, nodes = startGossipNodes(t, "s", 5, 4, func(c *Config) {
		c.Monitoring, c.ProbeInterval, c.Period, c.SharedSilenceHold = MonitorAll, DefaultProbeInterval, 100*time.Millisecond, hold
	})
	defer func() {
		stopAll(nodes)
		time.Sleep(3 * DefaultProbeInterval)
	}()
	eventually(t, 30*time.Second, "every node trusts every other", allTrust(nodes, ids))
	time.Sleep(10 * time.Second) // detectors warm: margins learnt on a clean network
	before := 0.0
	for _, nd := range nodes {
		before += suspicionsBy(nd, ids)
	}
	for range 3 {
		network.SetDelay(300 * time.Millisecond)
		time.Sleep(time.Second)
		network.SetDelay(0)
		time.Sleep(4 * time.Second)
	}
	for _, nd := range nodes {
		suspicions += suspicionsBy(nd, ids)
		held += testutil.ToFloat64(nd.c.metrics.HeldSuspicions)
	}
	return suspicions - before, held
}

// TestSharedDelaySpikeIsNotACrash: a 300 ms delay on every link at once
// silences every peer together; with the hold no node suspects any, and
// without it (the detector alone) they do, so the test can fail.
// Virtual time, production heartbeat period.
func TestSharedDelaySpikeIsNotACrash(t *testing.T) {
	t.Run("hold", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			s, held := spikeNetwork(t, true)
			t.Logf("with the hold: %v suspicions, %v held", s, held)
			if s > 0 {
				t.Errorf("%v suspicions across three delay spikes every link shared, want 0", s)
			}
			if held == 0 {
				t.Error("no suspicion was held: the spikes did not reach the detectors")
			}
		})
	})
	t.Run("detector alone", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			s, _ := spikeNetwork(t, false)
			t.Logf("without the hold: %v suspicions", s)
			if s == 0 {
				t.Error("without the hold the spikes caused no suspicion: the test shows nothing")
			}
		})
	})
}

// TestHoldLeavesCrashAndIsolationDetected: the hold must not hide a real
// failure. A crashed node is suspected by every other node well before
// the hold could end (the others' heartbeats still come on time), and a
// node cut off from everyone is suspected at once by the others and
// suspects them itself once the hold ends. Five nodes, and three (where
// one other peer's heartbeats are the only evidence).
func TestHoldLeavesCrashAndIsolationDetected(t *testing.T) {
	for _, n := range []int{5, 3} {
		t.Run(fmt.Sprint(n, " nodes"), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) { crashAndIsolation(t, n) })
		})
	}
}

// crashAndIsolation cuts one of n nodes off, heals it, then crashes another.
func crashAndIsolation(t *testing.T, n int) {
	network := networkOf(t)
	ids, addrs, nodes := startGossipNodes(t, "h", n, 4, func(c *Config) {
		c.Monitoring, c.ProbeInterval, c.Period, c.SharedSilenceHold = MonitorAll, DefaultProbeInterval, 100*time.Millisecond, true
	})
	defer func() {
		stopAll(nodes)
		time.Sleep(3 * DefaultProbeInterval)
	}()
	eventually(t, 30*time.Second, "every node trusts every other", allTrust(nodes, ids))
	time.Sleep(10 * time.Second)
	holdEnds := nodes[ids[0]].c.cfg.Period + nodes[ids[0]].c.holdCap()

	// Isolation: the last node cut off both ways.
	island, others := ids[n-1], ids[:n-1]
	for _, id := range others {
		network.Cut(addrs[id], addrs[island])
		network.Cut(addrs[island], addrs[id])
	}
	start := time.Now()
	eventually(t, 5*time.Second, "every other node suspects the island", func() bool {
		for _, id := range others {
			if nodes[id].trusts(island) {
				return false
			}
		}
		return true
	})
	byOthers := time.Since(start)
	if byOthers >= holdEnds {
		t.Errorf("the island was suspected by all after %v: the others' on-time heartbeats should have released the hold before %v", byOthers, holdEnds)
	}
	eventually(t, 5*time.Second, "the island suspects every other node", func() bool {
		for _, id := range others {
			if nodes[island].trusts(id) {
				return false
			}
		}
		return true
	})
	byIsland := time.Since(start)
	if byIsland < holdEnds-nodes[ids[0]].c.cfg.Period {
		t.Errorf("the island suspected everyone after %v, before its hold (%v) could end", byIsland, holdEnds)
	}
	t.Logf("island suspected by all in %v; it suspected all in %v (hold ends %v past a peer's due time)", byOthers, byIsland, holdEnds)
	for _, id := range others {
		network.Heal(addrs[id], addrs[island])
		network.Heal(addrs[island], addrs[id])
	}
	eventually(t, 10*time.Second, "every node trusts every other after the heal", allTrust(nodes, ids))
	time.Sleep(5 * time.Second)

	// Crash: another node stops without a word.
	crashed := ids[n-2]
	cn := nodes[crashed]
	delete(nodes, crashed)
	start = time.Now()
	cn.net.HandleStreams(cn.addr, nil)
	_ = cn.conn.Close()
	cn.cancel()
	<-cn.done
	eventually(t, 5*time.Second, "every other node suspects the crashed one", func() bool {
		for _, id := range ids[:n-2] {
			if nodes[id].trusts(crashed) {
				return false
			}
		}
		return !nodes[island].trusts(crashed)
	})
	took := time.Since(start)
	drainMembership()
	t.Logf("crash suspected by all in %v", took)
	if took >= holdEnds {
		t.Errorf("a crash was suspected by all after %v: the hold (%v) delayed it", took, holdEnds)
	}
}
