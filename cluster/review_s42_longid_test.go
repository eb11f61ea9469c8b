package cluster

// DEFECT, medium (failed before 2026-12-07). 84459db put the receiver's id
// in every heartbeat (Heartbeat.To) and Encode refuses one over 64 bytes;
// the Sender returned Encode's error from Run, which stopped Cluster.Run,
// which stopped the node. Node ids were bounded at 64 bytes only for this
// node's own node_id: neither cluster.peers' ids nor a member's memberlist
// name were, so a cluster.peers entry with a 65-byte id, or one member
// announcing a 65-byte name, made the node's cluster loop fail at its
// first heartbeat to it. Now config and cluster.New refuse such a peer id
// (naming it), memberUp leaves such a member out, and the Sender skips a
// target it cannot encode for, keeping the others.

import (
	"context"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/edgecache/edge/cluster/wire"
	"github.com/edgecache/edge/indicators"
	"github.com/edgecache/edge/proxy"
)

func TestS42APeerWithALongIDIsRefusedAtStart(t *testing.T) {
	long := strings.Repeat("p", 65)
	_, err := New(Config{
		NodeID: "n0", Listen: "127.0.0.1:0", Peers: map[string]string{long: "127.0.0.1:9", "n1": "127.0.0.1:9"}, Secret: []byte("cluster-test-secret"),
		Period: 100 * time.Millisecond, Detector: "ml", Selection: SelectionFNA, Mode: mustMode("hybrid"), Arity: 4, Q: 2, HotThreshold: 3,
		PeerTimeout: 200 * time.Millisecond, Indicator: indicators.DefaultFilterConfig(1000),
	}, nopFetcher{}, proxy.NewStore(1<<20, 4), NewMetrics(prometheus.NewRegistry()), slog.New(slog.DiscardHandler))
	if err == nil || !strings.Contains(err.Error(), long) {
		t.Fatalf("a %d-byte peer id: %v, want an error naming it", len(long), err)
	}
}

func TestS42ASenderSkipsATargetItCannotEncodeFor(t *testing.T) {
	long := strings.Repeat("p", 65)
	network := wire.NewMemNetwork()
	out, err := network.Listen("10.0.0.1:7000")
	if err != nil {
		t.Fatal(err)
	}
	in, err := network.Listen("10.0.0.2:7000")
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	to, _ := net.ResolveUDPAddr("udp", "10.0.0.2:7000")
	var mu sync.Mutex
	var refused []string
	s := &wire.Sender{Node: "n0", Incarnation: 1, Secret: []byte("k"), Period: 10 * time.Millisecond,
		Refused: func(target string, _ error) { mu.Lock(); refused = append(refused, target); mu.Unlock() }}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- s.Run(ctx, out, func() map[string]*net.UDPAddr { return map[string]*net.UDPAddr{long: to, "n1": to} })
	}()
	v := wire.NewVerifier([]byte("k"), 5*time.Second, "n1")
	buf := make([]byte, wire.MaxPacket+1)
	_ = in.SetReadDeadline(time.Now().Add(5 * time.Second))
	n, _, err := in.ReadFromUDP(buf)
	if err != nil {
		t.Fatalf("n1 got no heartbeat while a target with a long id was in the list: %v", err)
	}
	if _, err := v.Verify(buf[:n], time.Now().UnixNano()); err != nil {
		t.Fatalf("n1's heartbeat: %v", err)
	}
	if err := <-done; err != nil {
		t.Fatalf("the sender stopped: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(refused) == 0 || refused[0] != long {
		t.Errorf("refused targets %v, want the long id reported", refused)
	}
}
