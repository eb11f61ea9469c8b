package cluster

import (
	"net"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/edgecache/edge/cluster/wire"
)

// TestForgettingRacesNothing (a review's): membership flapping, heartbeats and probe asks of
// the peer, the gauges' export, the status page and forgetting, all at
// once (run with -race): no race, no panic; a member is never forgotten.
func TestForgettingRacesNothing(t *testing.T) {
	reg := prometheus.NewRegistry()
	a := reviewCluster(t, "a0", reg)
	node := &memberlist.Node{Name: "b1", Addr: net.ParseIP("127.0.0.1"), Port: 1, Meta: nodeMeta{Incarnation: 1}.encode()}
	var wg sync.WaitGroup
	stop := make(chan struct{})
	run := func(f func(i int)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				f(i)
			}
		}()
	}
	run(func(i int) {
		if i%2 == 0 {
			a.mlView.set(node)
			a.memberUp(node, "join")
		} else {
			a.mlView.remove(node.Name)
			a.memberDown(node)
		}
	})
	run(func(i int) {
		now := time.Now()
		a.received(wire.Received{Heartbeat: wire.Heartbeat{Node: "b1", Incarnation: 1, Seq: uint64(i + 1), SendNs: now.UnixNano()}, RecvNs: now.UnixNano()})
		a.received(wire.Received{Heartbeat: wire.Heartbeat{Node: "b1", Incarnation: 1, Seq: uint64(i + 1), SendNs: now.UnixNano(), Probe: wire.ProbeAsk}, RecvNs: now.UnixNano()})
	})
	run(func(int) {
		a.forgetDeparted(time.Now().Add(time.Hour))
		a.mu.Lock()
		if p := a.peers["b1"]; p != nil && p.member && false {
			t.Error("unreachable")
		}
		a.mu.Unlock()
	})
	run(func(int) {
		a.mu.Lock()
		a.exportPeerGauges(time.Now())
		a.mu.Unlock()
		_ = a.Peers()
		_ = a.Monitoring()
		a.reconcileMembers()
	})
	run(func(int) {
		if _, err := reg.Gather(); err != nil {
			t.Error(err)
		}
	})
	time.Sleep(2 * time.Second)
	close(stop)
	wg.Wait()
}

// TestAMemberIsNeverForgotten (a review's): whatever leftAt says, a member (rejoined
// after leaving long ago) is not forgotten.
func TestAMemberIsNeverForgotten(t *testing.T) {
	a := reviewCluster(t, "a0", prometheus.NewRegistry())
	node := &memberlist.Node{Name: "b1", Addr: net.ParseIP("127.0.0.1"), Port: 1, Meta: nodeMeta{Incarnation: 1}.encode()}
	a.memberUp(node, "join")
	a.memberDown(node)
	node.Meta = nodeMeta{Incarnation: 2}.encode() // restarted
	a.memberUp(node, "join")
	a.forgetDeparted(time.Now().Add(time.Hour))
	if a.peer("b1") == nil {
		t.Fatal("a rejoined member was forgotten")
	}
	a.memberDown(node)
	a.forgetDeparted(time.Now().Add(a.forgetAfter() - time.Second))
	if a.peer("b1") == nil {
		t.Fatal("forgotten before forgetAfter since its latest departure")
	}
	a.forgetDeparted(time.Now().Add(a.forgetAfter() + time.Second))
	if a.peer("b1") != nil {
		t.Fatal("not forgotten after forgetAfter")
	}
	// Its heartbeat, probe ask and answer now: counted as unknown, no panic.
	now := time.Now()
	for _, k := range []wire.ProbeKind{wire.NotProbe, wire.ProbeAsk, wire.ProbeAnswer} {
		a.received(wire.Received{Heartbeat: wire.Heartbeat{Node: "b1", Incarnation: 2, Seq: 7, SendNs: now.UnixNano(), Epoch: 3, Probe: k}, RecvNs: now.UnixNano()})
	}
	if a.unknownHB.Load() != 3 {
		t.Errorf("unknown heartbeats %d, want 3", a.unknownHB.Load())
	}
	a.memberUp(node, "join")
	if p := a.peer("b1"); p == nil || !p.member || !p.trusted {
		t.Fatal("not learnt again")
	}
}

// poolShares is how many replicas region's calibration pool holds a share of.
func poolShares(c *Cluster, region string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	pool := c.calPools[region]
	if pool == nil {
		return 0
	}
	return reflect.ValueOf(pool).Elem().FieldByName("shares").Len()
}

// TestAForgottenPeersReplicaLeavesItsPool (a review's): a departed peer's
// heartbeat (its first of an incarnation: a restart, or the first this
// node hears) gave it a new replica in its region's calibration pool,
// although it was no member (memberDown had taken it out: "its outcomes
// would stay in the region's prior, frozen"), and forgetting the peer left
// that replica in the pool for good. A departed peer's replica now stays
// out of the pool, and forgetting takes it out in any case.
func TestAForgottenPeersReplicaLeavesItsPool(t *testing.T) {
	a := reviewCluster(t, "a0", prometheus.NewRegistry())
	stay := &memberlist.Node{Name: "c1", Addr: net.ParseIP("127.0.0.1"), Port: 2, Meta: nodeMeta{Region: "eu", Incarnation: 1}.encode()}
	gone := &memberlist.Node{Name: "b1", Addr: net.ParseIP("127.0.0.1"), Port: 1, Meta: nodeMeta{Region: "eu", Incarnation: 1}.encode()}
	a.memberUp(stay, "join")
	a.memberUp(gone, "join")
	if n := poolShares(a, "eu"); n != 2 {
		t.Fatalf("pool eu holds %d replicas, want 2", n)
	}
	a.memberDown(gone)
	if n := poolShares(a, "eu"); n != 1 {
		t.Fatalf("after b1 left, pool eu holds %d replicas, want 1", n)
	}
	now := time.Now()
	a.received(wire.Received{Heartbeat: wire.Heartbeat{Node: "b1", Incarnation: 2, Seq: 1, SendNs: now.UnixNano(), Region: "eu"}, RecvNs: now.UnixNano()})
	a.forgetDeparted(time.Now().Add(a.forgetAfter() + time.Second))
	if a.peer("b1") != nil {
		t.Fatal("b1 not forgotten")
	}
	a.mu.Lock()
	a.exportPeerGauges(time.Now()) // prunes pools of regions nobody is in (eu has c1)
	a.mu.Unlock()
	if n := poolShares(a, "eu"); n != 1 {
		t.Errorf("pool eu holds %d replicas with b1 forgotten, want 1 (c1's): the forgotten peer's replica stays in the region's prior", n)
	}
}
