package cluster

// DEFECT (failed before 2026-12-07: the receiver check now follows the
// skew check, and the warning is keyed by host). wire.Verifier refused a heartbeat addressed to
// another node (RejectReceiver, *wire.Misaddressed) BEFORE its skew and
// replay checks, and heartbeatRejected hands a Misaddressed packet that
// names this node's id to checkIDConflict. So one heartbeat this node
// sent in an earlier incarnation (to any peer, captured off the wire at
// any time in the past: no secret needed) can be replayed to it forever:
// each replay logs "another node sends heartbeats with this node's id",
// and, the warning being keyed by source address WITH port and not
// bounded by sourcesPerCause, a stranger on one host gets one line per
// source port (up to the 1024 keys misconfigMemory holds) every
// misconfigRepeat. Before 84459db the conflict check ran on accepted
// heartbeats only (skew ±maxSkew and the replay window applied).

import (
	"bytes"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/edgecache/edge/cluster/wire"
)

func TestS42AnOldCapturedHeartbeatOfOursRaisesTheIDConflictForever(t *testing.T) {
	var out bytes.Buffer
	secret := []byte("s42-cluster-secret-0123456789")
	c := &Cluster{log: slog.New(slog.NewTextHandler(&out, nil)), warned: newMisconfigMemory(), incarnation: 2,
		cfg: Config{NodeID: "edge-1", Period: 100 * time.Millisecond}, peers: map[string]*Peer{}}
	v := wire.NewVerifier(secret, maxSkew, "edge-1")
	// Captured a day ago: edge-1's heartbeat to edge-2 in its previous
	// incarnation (1).
	old := time.Now().Add(-24 * time.Hour)
	b, err := wire.Heartbeat{Node: "edge-1", To: "edge-2", Incarnation: 1, Seq: 7, SendNs: old.UnixNano()}.Encode(secret)
	if err != nil {
		t.Fatal(err)
	}
	const ports = 50
	for p := range ports {
		_, err := v.Verify(b, time.Now().UnixNano()) // the same bytes each time
		if r, _ := wire.ReasonOf(err); r == wire.RejectSkew || r == wire.RejectReplay {
			t.Logf("refused as %s (the fixed behaviour)", r)
		}
		c.heartbeatRejected(&net.UDPAddr{IP: net.IPv4(203, 0, 113, 9), Port: 40000 + p}, err)
	}
	n := strings.Count(out.String(), "this node's id")
	t.Logf("%d replays of one day-old packet from one host: %d id-conflict warnings", ports, n)
	if n > 0 {
		t.Errorf("a day-old captured heartbeat of this node's previous incarnation, replayed by a stranger, logged %d id-conflict warnings (want 0: it is outside the skew window)", n)
	}
}

// DEFECT minor (failed before 2026-12-07): the same ordering made any
// authentic heartbeat ever sent to another node, replayed at any later
// time, log the "receiver" misconfiguration warning (bounded by
// sourcesPerCause per misconfigRepeat) and count under reason
// "receiver" rather than "skew".
func TestS42AnAncientMisaddressedReplayIsCountedAsSkew(t *testing.T) {
	secret := []byte("s42-cluster-secret-0123456789")
	v := wire.NewVerifier(secret, maxSkew, "edge-3")
	b, _ := wire.Heartbeat{Node: "edge-1", To: "edge-2", Incarnation: 1, Seq: 7, SendNs: time.Now().Add(-24 * time.Hour).UnixNano()}.Encode(secret)
	_, err := v.Verify(b, time.Now().UnixNano())
	if r, _ := wire.ReasonOf(err); r != wire.RejectSkew {
		t.Errorf("a day-old heartbeat of edge-1 to edge-2, replayed to edge-3: refused as %q, want %q (the operator is told to fix cluster.peers)", r, wire.RejectSkew)
	}
}
