package node

import (
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/edgecache/edge/proxy"
)

// TestS13ClientConnLimiterKeysEverySocketFormOnce checked (holds): the
// connection bound counts a client once over every form ipOf gets from a
// socket (TCP or UDP, IPv4 as 4 or 16 bytes or mapped, IPv6 with a zone or
// not, any address of one /64): TCP and QUIC together; a release under
// another form of the same client gives its slot back; another IPv4
// address, /64 or IPv4 vs its IPv4-compatible spelling are other clients;
// after every release nothing is open and the map is empty.
func TestS13ClientConnLimiterKeysEverySocketFormOnce(t *testing.T) {
	l := newConnLimiter(0, 2, prometheus.NewRegistry())
	v4a := ipOf(&net.TCPAddr{IP: net.ParseIP("192.0.2.1"), Port: 1})       // 16-byte
	v4b := ipOf(&net.UDPAddr{IP: net.ParseIP("192.0.2.1").To4(), Port: 2}) // QUIC, 4-byte
	v4c := netip.MustParseAddr("::ffff:192.0.2.1")
	for _, a := range []netip.Addr{v4a, v4b} {
		if r := l.admit(a); r != "" {
			t.Fatalf("admit(%v) = %q", a, r)
		}
	}
	if r := l.admit(v4c); r != refusedPerClient {
		t.Errorf("a third connection of 192.0.2.1 (mapped): %q", r)
	}
	v6a := ipOf(&net.UDPAddr{IP: net.ParseIP("fe80::1"), Zone: "eth0", Port: 1})
	v6b := ipOf(&net.TCPAddr{IP: net.ParseIP("FE80::ABCD"), Zone: "eth1", Port: 1})
	v6c := ipOf(&net.TCPAddr{IP: net.ParseIP("fe80::ffff:ffff:ffff:ffff"), Port: 1})
	for _, a := range []netip.Addr{v6a, v6b} {
		if r := l.admit(a); r != "" {
			t.Fatalf("admit(%v) = %q", a, r)
		}
	}
	if r := l.admit(v6c); r != refusedPerClient {
		t.Errorf("a third connection of fe80::/64: %q", r)
	}
	others := []netip.Addr{netip.MustParseAddr("192.0.2.2"), netip.MustParseAddr("::c000:201"), netip.MustParseAddr("fe80:0:0:1::1")}
	for _, a := range others {
		if r := l.admit(a); r != "" {
			t.Errorf("admit(%v), another client: %q", a, r)
		}
	}
	// Released under other forms of the same clients.
	for _, a := range []netip.Addr{v4c, netip.MustParseAddr("192.0.2.1"), v6c, netip.MustParseAddr("fe80::9%lo")} {
		l.release(a)
	}
	if r := l.admit(v4a); r != "" {
		t.Errorf("192.0.2.1 refused after its slots came back: %q", r)
	}
	l.release(v4a)
	for _, a := range others {
		l.release(a)
	}
	if l.Open() != 0 || len(l.byAddr) != 0 {
		t.Fatalf("after every release: open %d, clients %v", l.Open(), l.byAddr)
	}
}

// TestS13ClientPeersOfOneSubnetShareOneInflightBound: a peer's data
// request (probe or climb) reaches n.servePeer → proxy.ServeInbound as
// Relayed (the cluster authenticated it). It is not held to
// limits.max_inflight_per_client: the ingress held its client to it, and
// the peer's address stands for every client it serves. Keyed by address,
// every peer of one IPv6 /64 (a cluster's servers on one subnet) shared
// one bound, and each further request got a 429 that its sender then
// fetched from the origin (found by this review after the /64 keying; the
// bound on peers was older). The peer hit path (cluster/peerhit.go) takes
// no slot either.
func TestS13ClientPeersOfOneSubnetShareOneInflightBound(t *testing.T) {
	entered := make(chan struct{}, 4)
	release := make(chan struct{})
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-store")
		if r.URL.Path == "/hold" {
			entered <- struct{}{}
			select {
			case <-release:
			case <-time.After(4 * time.Second):
			}
		}
		_, _ = w.Write([]byte("ok"))
	}))
	t.Cleanup(origin.Close)
	n := startNode(t, origin.URL, "limits: {max_inflight_per_client: 1}\n")
	peer := func(path, remote string) int {
		r := httptest.NewRequest("GET", "http://"+n.PublicAddr()+path, nil)
		r.RemoteAddr = remote
		w := httptest.NewRecorder()
		n.servePeer(w, r, proxy.Inbound{Relayed: true}) // as the cluster handler, once the MAC is checked
		return w.Code
	}
	done := make(chan int, 1)
	go func() { done <- peer("/hold", "[2001:db8:c1::a]:7946") }() // node A
	select {
	case <-entered:
	case <-time.After(4 * time.Second):
		t.Fatal("node A's request never reached the origin")
	}
	got := peer("/x", "[2001:db8:c1::b]:7946") // node B, same subnet, unrelated
	close(release)
	<-done
	if got != http.StatusOK {
		t.Errorf("node B's request while node A (another node of its /64) has one in flight: %d; a relayed request must not be held to a client's bound", got)
	}
}
