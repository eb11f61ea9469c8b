// Regression tests from a hostile review of the memberlist change: each
// failed before its fix.
package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// flakyListener fails its first Accept with EMFILE (fd exhaustion), then works.
type flakyListener struct {
	net.Listener
	failed bool
}

func (f *flakyListener) Accept() (net.Conn, error) {
	if !f.failed {
		f.failed = true
		return nil, &net.OpError{Op: "accept", Net: "tcp", Err: os.NewSyscallError("accept", syscall.EMFILE)}
	}
	return f.Listener.Accept()
}

// One failed Accept (a connection flood exhausting descriptors) closed the
// cluster port's TCP side for good.
func TestMuxListenerSurvivesEMFILE(t *testing.T) {
	c := newTestCluster(t, "hybrid", nil)
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := c.MuxListener(&flakyListener{Listener: raw})
	defer ln.Close()
	go func() {
		if conn, err := net.Dial("tcp", raw.Addr().String()); err == nil {
			_, _ = conn.Write([]byte("GET / HTTP/1.1\r\n\r\n"))
			time.Sleep(3 * time.Second)
			conn.Close()
		}
	}()
	conn, err := ln.Accept()
	if err != nil {
		t.Fatalf("one EMFILE killed the peer listener: %v", err)
	}
	conn.Close()
}

// A member memberlist declared dead stayed a heartbeat target for good
// with all-to-all monitoring.
func TestDeadMemberIsNotHeartbeated(t *testing.T) {
	c := newTestCluster(t, "hybrid", map[string]string{"b": "127.0.0.1:9"})
	c.memberDown(&memberlist.Node{Name: "b"})
	if _, ok := c.targets()["b"]; ok {
		t.Error("a dead non-member is still a heartbeat target")
	}
}

// memberUp rewrites p.Addr under c.mu while the pulls it starts read it:
// run with -race.
func TestMemberAddressChangeIsNotARace(t *testing.T) {
	c := newTestCluster(t, "hybrid", nil)
	for i := range 20 {
		meta := nodeMeta{Incarnation: 1, Epoch: uint64(i + 1)}.encode()
		c.memberUp(&memberlist.Node{Name: "x", Addr: net.ParseIP("127.0.0.1"), Port: uint16(1 + i%2), Meta: meta}, "update")
	}
	time.Sleep(200 * time.Millisecond)
}

// Spoofed undecryptable packets from many sources filled the memory of
// what was logged: a real misconfiguration was then not logged.
func TestGossipLogFloodIsBounded(t *testing.T) {
	c := newTestCluster(t, "hybrid", nil)
	w := mlLogWriter{c}
	for i := range 1100 {
		fmt.Fprintf(w, "[ERR] memberlist: Decrypt packet failed: no installed keys could decrypt the message from=10.%d.%d.1:7946\n", i/256, i%256)
	}
	if !c.warned.claim("conflict 192.0.2.1:7946", time.Now()) {
		t.Error("after a spoofed flood, a node-id conflict warning is suppressed")
	}
	if got := testutil.ToFloat64(c.metrics.GossipRejected.WithLabelValues("key")); got != 1100 {
		t.Errorf("counted %v of 1100 refusals", got)
	}
}

// The stream-side plaintext refusal, as memberlist v0.7.0 logs it, was
// neither recognised nor counted as plain.
func TestPlainMembershipTrafficIsRecognised(t *testing.T) {
	c := newTestCluster(t, "hybrid", nil)
	fmt.Fprintf(mlLogWriter{c}, "[ERR] memberlist: failed to receive: encryption is configured but remote state is not encrypted from=10.0.0.1:7946\n")
	if got := testutil.ToFloat64(c.metrics.GossipRejected.WithLabelValues("plain")); got != 1 {
		t.Errorf("plain rejections counted: %v", got)
	}
}

// Seeds named by host name (docker-compose.yml) never matched a member's
// address, so joined nodes kept joining them.
func TestSeedHostNamesAreResolved(t *testing.T) {
	c := newTestCluster(t, "hybrid", nil)
	got := c.resolveSeed(context.Background(), "localhost:7946")
	if !slices.Contains(got, "127.0.0.1:7946") {
		t.Errorf("localhost:7946 resolved to %v", got)
	}
	if got := c.resolveSeed(context.Background(), "10.0.0.1:7946"); !slices.Equal(got, []string{"10.0.0.1:7946"}) {
		t.Errorf("an IP seed changed: %v", got)
	}
}

// A configured peer's address is the operator's path to it (the fault lab
// puts a relay there, as a tunnel or proxy would): memberlist's report of
// the address the peer advertises must not reroute heartbeats and peer
// requests around it. A member found through membership follows
// memberlist's address.
func TestConfiguredPeerKeepsItsAddress(t *testing.T) {
	c := newTestCluster(t, "hybrid", map[string]string{"b": "127.0.0.1:9"})
	meta := nodeMeta{Incarnation: 1, Epoch: 1}.encode()
	c.memberUp(&memberlist.Node{Name: "b", Addr: net.ParseIP("127.0.0.2"), Port: 7946, Meta: meta}, "join")
	c.memberUp(&memberlist.Node{Name: "d", Addr: net.ParseIP("127.0.0.3"), Port: 7946, Meta: meta}, "join")
	c.memberUp(&memberlist.Node{Name: "d", Addr: net.ParseIP("127.0.0.4"), Port: 7946, Meta: meta}, "update")
	c.mu.Lock()
	defer c.mu.Unlock()
	if got := c.peers["b"].Addr; got != "127.0.0.1:9" {
		t.Errorf("configured peer b's address became %s", got)
	}
	if got := c.peers["d"].Addr; got != "127.0.0.4:7946" {
		t.Errorf("discovered peer d's address is %s, want memberlist's latest", got)
	}
}

// A static peer configured at an address other than the one it advertises
// (a relay, tunnel or proxy: the fault lab's relays) never matched a
// member's address, so every node warned after 30 s that a seed it had
// joined through was unreached. A static peer that is a member under its
// node id is no longer a seed.
func TestSeedBehindARelayIsNotUnreached(t *testing.T) {
	virtualTime(t, func(t *testing.T) {
		connA, connB := listenUDP(t, "127.0.0.1:0"), listenUDP(t, "127.0.0.1:0")
		a, b := connA.LocalAddr().String(), connB.LocalAddr().String()
		// a knows b only at an address nobody answers on; b joins a.
		na := startGossipNode(t, "ra", map[string]string{"rb": "127.0.0.1:1"}, connA, 2, func(c *Config) { c.Monitoring = MonitorAll })
		nb := startGossipNode(t, "rb", map[string]string{"ra": a}, connB, 2, func(c *Config) { c.Monitoring = MonitorAll })
		defer stopAll(map[string]*gossipNode{"ra": na, "rb": nb})
		eventually(t, 30*time.Second, "ra has rb as a memberlist member", func() bool {
			return na.c.mlView.snapshot()["rb"].addr == b
		})
		time.Sleep(2 * seedUnreachedAfter)
		if logs := na.log.String(); strings.Contains(logs, "a seed has not been reached") {
			t.Errorf("ra warns of an unreached seed though rb is a member:\n%s", logs)
		}
	})
}

// Streams queued for memberlist that it never read (it had not started, or
// had stopped) stayed open; so did streams accepted after Shutdown.
func TestShutdownClosesQueuedStreams(t *testing.T) {
	tr := newSharedTransport(nil, NewMetrics(prometheus.NewRegistry()))
	queued, queuedPeer := net.Pipe()
	tr.acceptStream(queued)
	if err := tr.Shutdown(); err != nil {
		t.Fatal(err)
	}
	late, latePeer := net.Pipe()
	tr.acceptStream(late)
	for name, peer := range map[string]net.Conn{"queued": queuedPeer, "late": latePeer} {
		_ = peer.SetReadDeadline(time.Now().Add(time.Second))
		if _, err := peer.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
			t.Errorf("the %s stream was not closed: read gave %v", name, err)
		}
	}
}

// A peer this node routed to but does not neighbour, cut one way (this
// node hears nothing from it, memberlist hears it through others), was
// suspected, then trusted again by membership once routedKeep passed
// without requests, then suspected again at the next request's timeout:
// a cycle of about 11 s for as long as the cut lasted. It now stays
// suspected (and monitored) until this node hears it again.
func TestOneWayCutDoesNotCycleTrust(t *testing.T) {
	virtualTime(t, func(t *testing.T) {
		network := networkOf(t)
		ids, addrs, nodes := startGossipNodes(t, "o", 6, 2)
		defer stopAll(nodes)
		eventually(t, 30*time.Second, "every node has every other as a member", func() bool {
			for _, id := range ids {
				for _, other := range ids {
					if id != other && !nodes[id].member(other) {
						return false
					}
				}
			}
			return true
		})
		me := nodes["o00"]
		var far string
		me.c.mu.Lock()
		for _, id := range ids[1:] {
			if p := me.c.peers[id]; !p.neighbour {
				far = id
				p.routedAt = time.Now() // a request was sent to it
				break
			}
		}
		me.c.mu.Unlock()
		if far == "" {
			t.Fatal("o00 neighbours every node; the test needs one it does not")
		}
		eventually(t, 5*time.Second, "o00 trusts "+far+" on its heartbeats", func() bool {
			me.c.mu.Lock()
			defer me.c.mu.Unlock()
			p := me.c.peers[far]
			return p.monitored && p.heard && p.trusted
		})
		network.Cut(addrs[far], addrs["o00"])
		eventually(t, 5*time.Second, "o00 suspects "+far, func() bool { return !me.trusts(far) })
		cutAt := time.Now()
		time.Sleep(3 * routedKeep)
		me.c.mu.Lock()
		var retrusted []time.Time
		for _, tr := range me.c.peers[far].history {
			if tr.Trusted && tr.At.After(cutAt) {
				retrusted = append(retrusted, tr.At)
			}
		}
		me.c.mu.Unlock()
		if len(retrusted) > 0 {
			t.Errorf("o00 trusted %s again %d times while it heard nothing from it", far, len(retrusted))
		}
		network.Heal(addrs[far], addrs["o00"])
		eventually(t, 5*time.Second, "o00 trusts "+far+" again once it hears it", func() bool { return me.trusts(far) })
	})
}

// A configured peer keeps its configured address (memberUp), so one that
// moves behind its host name must be followed through DNS: the name was
// resolved once, and heartbeats went to the old address for good.
func TestConfiguredPeerNameIsResolvedAgain(t *testing.T) {
	c := newTestCluster(t, "hybrid", map[string]string{"b": "localhost:9"})
	c.mu.Lock()
	c.peers["b"].udp = &net.UDPAddr{IP: net.ParseIP("192.0.2.7"), Port: 9} // where b was
	c.mu.Unlock()
	c.refreshPeerAddrs(context.Background())
	c.mu.Lock()
	defer c.mu.Unlock()
	if got := c.peers["b"].udp.String(); got != "127.0.0.1:9" && got != "[::1]:9" {
		t.Errorf("b's heartbeat address is %s after re-resolving localhost:9", got)
	}
}
