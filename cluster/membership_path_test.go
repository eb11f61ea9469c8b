package cluster

import (
	"io"
	"net"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

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
	synctest.Test(t, func(t *testing.T) {
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
		if got := na.c.transport.path(b); got != relay.addr {
			t.Errorf("membership path to pb is %s, want the relay %s", got, relay.addr)
		}
		if got := nb.c.transport.path(a); got != a {
			t.Errorf("membership path to pa is %s, want its own address (configured so)", got)
		}
	})
}
