package cluster

// Session 41's hostile review of what arrives from other nodes.
//
// DEFECT (failed before heartbeat version 4): a heartbeat carried no
// receiver, so one that n1
// sent to n2, copied off the wire by a stranger without cluster.secret
// and sent to n0 within the 5 s skew window from the stranger's own
// address, passes n0's verifier and cluster.received treats it as n1's
// heartbeat to n0: a suspicion of n1 ends (trusted again, on the ring),
// n0 starts heartbeating n1 because the copy says "Monitors" (it spoke of
// n2), and n1's RTT at n0 is computed from the echo of n2's heartbeat.
// With n1 cut off from n0 (a partition), the stranger keeps n1 trusted at
// n0 as long as n1 talks to n2, and n0 routes to a node it cannot reach.

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/edgecache/edge/cluster/wire"
)

func TestS41AHeartbeatCopiedFromAnotherLinkDoesNotEndASuspicion(t *testing.T) {
	c := newTestCluster(t, "hybrid", map[string]string{"n1": "10.0.0.1:7000", "n2": "10.0.0.2:7000"})
	network := wire.NewMemNetwork()
	conn, err := network.Listen("10.0.0.100:7000") // n0
	if err != nil {
		t.Fatal(err)
	}
	stranger, err := network.Listen("10.0.0.66:4444")
	if err != nil {
		t.Fatal(err)
	}
	defer stranger.Close()
	inc := uint64(time.Now().Add(-time.Hour).UnixNano())
	now := time.Now()
	c.mu.Lock()
	p := c.peers["n1"]
	p.member, p.monitored, p.seen, p.heard = true, true, true, true
	p.incarnation, p.lastRecv = inc, now.Add(-3*time.Second)
	c.setTrust(p, true)
	c.setTrust(p, false) // n0 suspects n1: it has heard nothing from it for 3 s
	c.mu.Unlock()

	// What n1 sent to n2 a moment ago, as the stranger copied it.
	toN2 := wire.Heartbeat{Node: "n1", To: "n2", Incarnation: inc, Seq: 500, SendNs: now.UnixNano(), Monitors: true,
		EchoSeq: 77, EchoSendNs: now.Add(-900 * time.Millisecond).UnixNano(), EchoHoldNs: int64(time.Millisecond)}
	b, err := toN2.Encode(c.cfg.Secret)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = wire.ReceiveShared(ctx, conn, c.verifier, c.received, nil, c.heartbeatRejected, c.transport.offer)
	}()
	defer func() { cancel(); <-done; _ = conn.Close() }()
	to, _ := net.ResolveUDPAddr("udp", "10.0.0.100:7000")
	if _, err := stranger.WriteToUDP(b, to); err != nil {
		t.Fatal(err)
	}
	var trusted, watched bool
	var rtt float64
	deadline := time.Now().Add(time.Second)
	for time.Now().Before(deadline) {
		c.mu.Lock()
		trusted, watched, rtt = p.trusted, !p.watchedAt.IsZero(), p.rtt
		c.mu.Unlock()
		if trusted {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	if trusted || watched || rtt != 0 {
		t.Errorf("n1's heartbeat to n2, replayed to n0 by a stranger, was taken as n1's to n0: trusted %v, n0 heartbeats n1 (Monitors) %v, RTT from n2's echo %.3f s", trusted, watched, rtt)
	}
	if n := c.verifier.Rejections()[wire.RejectReceiver]; n != 1 {
		t.Errorf("%d heartbeats refused as addressed to another node, want 1", n)
	}
}
