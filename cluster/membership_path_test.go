package cluster

import (
	"io"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// memRelay forwards every datagram and stream that reaches its address
// to target (a relay, tunnel or proxy in front of a node), counting the
// membership packets it carries.
type memRelay struct {
	addr   string
	gossip atomic.Int64
}

func startMemRelay(t *testing.T, target string) *memRelay {
	t.Helper()
	network := networkOf(t)
	conn := listenUDP(t, "127.0.0.1:0")
	r := &memRelay{addr: conn.LocalAddr().String()}
	to, err := net.ResolveUDPAddr("udp", target)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		buf := make([]byte, 64<<10)
		for {
			n, _, err := conn.ReadFromUDP(buf)
			if err != nil {
				return
			}
			if n > 0 && buf[0] == gossipTag {
				r.gossip.Add(1)
			}
			_, _ = conn.WriteToUDP(buf[:n], to)
		}
	}()
	network.HandleStreams(r.addr, func(in net.Conn) {
		out, err := network.DialStream(r.addr, target)
		if err != nil {
			_ = in.Close()
			return
		}
		go func() { _, _ = io.Copy(out, in); _ = out.Close() }()
		_, _ = io.Copy(in, out)
		_ = in.Close()
	})
	t.Cleanup(func() {
		network.HandleStreams(r.addr, nil)
		_ = conn.Close()
	})
	return r
}

// A configured peer's address is the operator's path to it (a relay,
// tunnel or proxy: the fault lab's relays, which carry its delay faults).
// Membership traffic took the address the peer advertises instead, around
// the path, so a fault on the path never reached memberlist, and a node
// that could reach a peer only through it declared the peer dead. Here pa
// knows pb only through a relay and the direct link pa → pb is cut:
// memberlist's probes go through the relay, and pb stays a member.
func TestMembershipTakesTheConfiguredPath(t *testing.T) {
	virtualTime(t, func(t *testing.T) {
		network := networkOf(t)
		connA, connB := listenUDP(t, "127.0.0.1:0"), listenUDP(t, "127.0.0.1:0")
		a, b := connA.LocalAddr().String(), connB.LocalAddr().String()
		relay := startMemRelay(t, b)
		opt := func(c *Config) { c.Monitoring = MonitorAll }
		na := startGossipNode(t, "pa", map[string]string{"pb": relay.addr}, connA, 2, opt)
		nb := startGossipNode(t, "pb", map[string]string{"pa": a}, connB, 2, opt)
		defer stopAll(map[string]*gossipNode{"pa": na, "pb": nb})
		eventually(t, 30*time.Second, "pa and pb members of each other", func() bool {
			return na.member("pb") && nb.member("pa") && na.trusts("pb") && nb.trusts("pa")
		})
		network.Cut(a, b)
		before := relay.gossip.Load()
		time.Sleep(20 * time.Second) // many suspicion timeouts at this probe interval
		if got := testutil.ToFloat64(na.c.metrics.MembershipEvents.WithLabelValues("leave")); got != 0 || !na.member("pb") {
			t.Errorf("pa declared pb dead %v times though the configured path to it works:\n%s", got, describe(map[string]*gossipNode{"pa": na, "pb": nb}))
		}
		if got := relay.gossip.Load() - before; got == 0 {
			t.Error("no membership packet went through the configured path")
		}
		if got := na.c.transport.path("pb", b); got != relay.addr {
			t.Errorf("membership path to pb is %s, want the relay %s", got, relay.addr)
		}
		if got := nb.c.transport.path("pa", a); got != a {
			t.Errorf("membership path to pa is %s, want its own address (configured so)", got)
		}
	})
}

// The path applies to the configured peer's name at the address it
// advertised when the path was set: an address another node takes over,
// an address memberlist learns for the peer since, a packet with no name
// (a join through a seed) go where memberlist says. A peer configured by
// host name has no path: its name is how it moves, and memberlist
// follows the move by the address it advertises (a path fixed to the
// old resolution kept probing the old address, a ghost member).
func TestGossipPathRules(t *testing.T) {
	c := newTestCluster(t, "hybrid", map[string]string{"b": "127.0.0.1:9", "d": "localhost:9"})
	meta := nodeMeta{Incarnation: 1, Epoch: 1}.encode()
	c.memberUp(&memberlist.Node{Name: "b", Addr: net.ParseIP("127.0.0.2"), Port: 7946, Meta: meta}, "join")
	c.memberUp(&memberlist.Node{Name: "d", Addr: net.ParseIP("127.0.0.4"), Port: 7946, Meta: meta}, "join")
	for _, tc := range []struct{ name, addr, want string }{
		{"b", "127.0.0.2:7946", "127.0.0.1:9"},    // the operator's path
		{"b", "127.0.0.5:7946", "127.0.0.5:7946"}, // not the address the path is for
		{"x", "127.0.0.2:7946", "127.0.0.2:7946"}, // another node at that address
		{"", "127.0.0.2:7946", "127.0.0.2:7946"},  // no name: a seed
		{"d", "127.0.0.4:7946", "127.0.0.4:7946"}, // configured by host name
	} {
		if got := c.transport.path(tc.name, tc.addr); got != tc.want {
			t.Errorf("path(%q, %s) = %s, want %s", tc.name, tc.addr, got, tc.want)
		}
	}
	// b now advertises its configured address: no path left.
	c.memberUp(&memberlist.Node{Name: "b", Addr: net.ParseIP("127.0.0.1"), Port: 9, Meta: meta}, "update")
	if got := c.transport.path("b", "127.0.0.2:7946"); got != "127.0.0.2:7946" {
		t.Errorf("a path outlived its address: %s", got)
	}
}
