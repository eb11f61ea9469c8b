package cluster

import (
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/edgecache/edge/cluster/wire"
	"github.com/edgecache/edge/indicators"
	"github.com/edgecache/edge/proxy"
	"github.com/edgecache/edge/routing"
)

// verifierPeers is the number of senders the heartbeat verifier keeps a
// replay window for.
func verifierPeers(c *Cluster) int {
	return reflect.ValueOf(c.verifier).Elem().FieldByName("peers").Len()
}

// TestAForgottenPeerLeavesTheHeartbeatVerifier (a review's): nodes come and go (each new
// name joins, heartbeats, crashes, and is forgotten); the peer table stays
// bounded, and so must the heartbeat verifier's replay windows (keyed by
// node id), which kept one entry for every node that ever sent a heartbeat.
func TestAForgottenPeerLeavesTheHeartbeatVerifier(t *testing.T) {
	virtualTime(t, func(t *testing.T) {
		const forget = 5 * time.Second
		opts := func(c *Config) { c.Monitoring, c.ForgetDepartedAfter = MonitorAll, forget }
		seedConn := listenUDP(t, "127.0.0.1:0")
		seed := map[string]string{"w00": seedConn.LocalAddr().String()}
		watcher := startGossipNode(t, "w00", nil, seedConn, 2, opts)
		nodes := map[string]*gossipNode{"w00": watcher}
		defer stopAll(nodes)
		const churn = 6
		for i := range churn {
			id := fmt.Sprintf("c%02d", i)
			n := startGossipNode(t, id, seed, listenUDP(t, "127.0.0.1:0"), 2, opts)
			eventually(t, 30*time.Second, id+" trusted and heard", func() bool {
				watcher.c.mu.Lock()
				defer watcher.c.mu.Unlock()
				p := watcher.c.peers[id]
				return p != nil && p.trusted && p.seen
			})
			n.crash()
			eventually(t, forget+60*time.Second, id+" forgotten", func() bool {
				watcher.c.mu.Lock()
				defer watcher.c.mu.Unlock()
				return watcher.c.peers[id] == nil
			})
		}
		watcher.c.mu.Lock()
		table := len(watcher.c.peers)
		watcher.c.mu.Unlock()
		windows := verifierPeers(watcher.c)
		t.Logf("after %d departed nodes: peer table %d, verifier replay windows %d", churn, table, windows)
		if windows > table {
			t.Errorf("the heartbeat verifier keeps %d replay windows for a peer table of %d: one per node that ever heartbeated, never forgotten", windows, table)
		}
	})
}

// gatedServer serves h on 127.0.0.1 once release is closed.
func gatedServer(t *testing.T, h http.Handler) (addr string, arrived chan struct{}, release chan struct{}) {
	arrived, release = make(chan struct{}, 16), make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived <- struct{}{}
		<-release
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://"), arrived, release
}

func reviewCluster(t *testing.T, id string, reg *prometheus.Registry) *Cluster {
	t.Helper()
	c, err := New(Config{
		NodeID: id, Listen: "127.0.0.1:0", Secret: []byte("cluster-test-secret"), Period: 100 * time.Millisecond,
		Detector: "ml", Selection: SelectionFNA, Mode: routing.ModeHybrid, Arity: 4, Q: 2, HotThreshold: 3, PeerTimeout: 2 * time.Second,
		Indicator: indicators.DefaultFilterConfig(1000),
	}, nopFetcher{}, proxy.NewStore(1<<20, 4), NewMetrics(reg), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestAPullInFlightDoesNotBringBackAForgottenPeersSeries (a review's): a
// peer is forgotten while an indicator pull waits for its answer; the pull
// then counted edge_indicator_pulls_total{peer=...} again, a series
// nothing would ever delete (the peer no longer in the table); and a
// departed peer's heartbeat started such pulls (it no longer does).
func TestAPullInFlightDoesNotBringBackAForgottenPeersSeries(t *testing.T) {
	// b1 advertises an indicator behind a gate.
	b := reviewCluster(t, "b1", prometheus.NewRegistry())
	b.advertise()
	if b.advEpoch == 0 {
		t.Fatal("b1 advertised no epoch")
	}
	addr, arrived, release := gatedServer(t, b.PeerHandler(func(http.ResponseWriter, *http.Request, proxy.Inbound) {}, func(proxy.PurgeRequest) (int, error) { return 0, nil }))

	reg := prometheus.NewRegistry()
	a := reviewCluster(t, "a0", reg)
	host, port, _ := net.SplitHostPort(addr)
	pn, _ := strconv.Atoi(port)
	node := &memberlist.Node{Name: "b1", Addr: net.ParseIP(host), Port: uint16(pn), Meta: nodeMeta{Incarnation: 1}.encode()}
	a.memberUp(node, "join")
	// A pull of the member's new epoch (a heartbeat's or its metadata's)
	// waits at b1's gate while b1 leaves.
	a.mu.Lock()
	p := a.peers["b1"]
	a.mu.Unlock()
	go a.pullIndicator(p, b.advEpoch)
	select {
	case <-arrived:
	case <-time.After(5 * time.Second):
		t.Fatal("no pull reached b1")
	}
	a.memberDown(node)
	// A heartbeat of the departed peer (still sending, or late) starts no
	// pull of its own.
	now := time.Now()
	a.received(wire.Received{Heartbeat: wire.Heartbeat{Node: "b1", Incarnation: 1, Seq: 1, SendNs: now.UnixNano(), Epoch: b.advEpoch + 1}, RecvNs: now.UnixNano()})
	select {
	case <-arrived:
		t.Error("a departed peer's heartbeat started an indicator pull")
	case <-time.After(100 * time.Millisecond):
	}
	a.forgetDeparted(time.Now().Add(a.forgetAfter() + time.Second))
	a.mu.Lock()
	gone := a.peers["b1"] == nil
	a.mu.Unlock()
	if !gone {
		t.Fatal("b1 not forgotten")
	}
	if n := seriesOf(t, reg, "b1"); n != 0 {
		t.Fatalf("%d series of b1 right after forgetting", n)
	}
	close(release)
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) && seriesOf(t, reg, "b1") == 0 {
		time.Sleep(10 * time.Millisecond)
	}
	if n := seriesOf(t, reg, "b1"); n != 0 {
		t.Errorf("%d series labelled with the forgotten peer b1 after its pull in flight ended (edge_indicator_pulls_total): /metrics keeps a series per departed peer again", n)
	}
}
