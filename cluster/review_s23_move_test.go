package cluster

// Session 23's hostile review of checkMove / followMove (177521f).

import (
	"context"
	"net"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/edgecache/edge/cluster/wire"
)

// s23Node builds a memberlist.Node for name advertising addr with edge
// metadata (incarnation inc, epoch epoch).
func s23Node(t *testing.T, name, addr string, inc, epoch uint64) *memberlist.Node {
	t.Helper()
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	ua, err := net.ResolveUDPAddr("udp", net.JoinHostPort(host, port))
	if err != nil {
		t.Fatal(err)
	}
	meta := nodeMeta{Incarnation: inc, Epoch: epoch, Stamp: time.Now().UnixNano()}.encode()
	return &memberlist.Node{Name: name, Addr: ua.IP, Port: uint16(ua.Port), Meta: meta, DMax: metaVersion}
}

// s23ClosedAddr is a 127.0.0.1 address nothing listens on (TCP or UDP).
func s23ClosedAddr(t *testing.T) string {
	t.Helper()
	u, l := s21Listen(t)
	a := u.LocalAddr().String()
	_ = u.Close()
	_ = l.Close()
	return a
}

func s23MoveChecking(c *Cluster, id string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	p := c.peers[id]
	return p != nil && p.moveChecking
}

// Found by session 23's review, now mended: a followed move is never undone: a peer followed to an address it advertises (here because checkMove's result landed after the peer crashed between its two dials) stays reached there after it comes back at its configured address, though its heartbeats come from there; it is never trusted.
//
// memberUp (membership.go, `case p.advertisedConfigured:`): `if addr ==
// p.Addr { p.movedTo = "" // followed already }` — once p.Addr is the
// advertised address nothing checks again; received (cluster.go) follows
// only *to* movedTo, never back to configuredAddr; memberDown does not
// clear movedTo, so a check started before the peer left is applied after.
func TestS23AFollowedMoveIsUndoneWhenThePeerAnswersAtItsConfiguredAddress(t *testing.T) {
	// X: the address c advertises (say a NAT's public address); a TCP
	// service answers there, nothing takes UDP.
	xl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = xl.Close() })
	go func() {
		for {
			conn, err := xl.Accept()
			if err != nil {
				return
			}
			_ = conn.Close()
		}
	}()
	x := xl.Addr().String()
	var crash atomic.Pointer[func()] // run once, at the first move check's dial of x
	var d net.Dialer
	dial := func(ctx context.Context, addr string) (net.Conn, error) {
		if addr == x {
			if f := crash.Swap(nil); f != nil {
				(*f)()
			}
		}
		return d.DialContext(ctx, "tcp", addr)
	}
	nodes := s21Cluster(t, []string{"a", "b", "c"}, func(cfg *Config) { cfg.GossipDial = dial })
	a, b, c := nodes["a"], nodes["b"], nodes["c"]
	home := c.addr
	c.stop()
	s21Eventually(t, 20*time.Second, "a sees c leave", func() bool { return !a.member("c") })
	rebind := func() (*net.UDPConn, net.Listener) { return s21Rebind(t, home) }
	// c comes back at home, advertising x; it crashes just as a's move
	// check dials x (its listener gone: home refuses the check's second dial).
	u, l := rebind()
	var c2 *s21Node
	var c2mu sync.Mutex
	f := func() {
		c2mu.Lock()
		defer c2mu.Unlock()
		// Gone at home for good: no TCP, and no heartbeats from there
		// either, which would take a back at once (received), so that the
		// follow below could be missed between two polls on a busy
		// machine (a loaded make test).
		_ = l.Close()
		_ = u.Close()
	}
	crash.Store(&f)
	c2 = s21StartOn(t, "c", u, l, map[string]string{"a": a.addr, "b": b.addr}, func(cfg *Config) { cfg.Advertise = x; cfg.GossipDial = dial })
	s21Eventually(t, 20*time.Second, "a follows c to x (x answered, home did not)", func() bool { return a.peerAddr("c") == x })
	c2mu.Lock()
	c2.stop()
	c2mu.Unlock()
	s21Eventually(t, 30*time.Second, "a sees c leave", func() bool { return !a.member("c") })
	// c is restarted at home, as configured, still advertising x.
	before := len(a.log.String())
	u, l = rebind()
	s21StartOn(t, "c", u, l, map[string]string{"a": a.addr, "b": b.addr}, func(cfg *Config) { cfg.Advertise = x; cfg.GossipDial = dial })
	s21Eventually(t, 20*time.Second, "a has c in its memberlist view again", func() bool { return a.c.mlView.has("c") })
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if a.peerAddr("c") == home && a.trusts("c") {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if got := a.peerAddr("c"); got != home {
		t.Errorf("c runs at its configured %s (its heartbeats come from there, its TCP port answers) but a still sends it heartbeats and peer requests at %s, 20 s after it came back", home, got)
	}
	if !a.trusts("c") {
		t.Errorf("a does not trust c, alive at its configured address %s", home)
	}
	if left := strings.Count(a.log.String()[before:], `msg="member left" self=a peer=c`); left > 1 {
		t.Errorf("c, alive at its configured address, left a's membership %d times in the 20 s after it came back", left)
	}
}

// Found by session 23's review, now mended: checkMove outlives Run: it runs on context.Background, untracked, and after Run has returned it still dials, follows the move (p.Addr, transport paths) and logs.
//
// memberUp starts `go c.checkMove(...)` (membership.go) with no tie to
// Run's context or wait group; answers() uses context.Background().
func TestS23MoveCheckDoesNotOutliveRun(t *testing.T) {
	configured := s23ClosedAddr(t) // b, configured here; not running
	to := s23ClosedAddr(t)         // where b advertises now
	var dials atomic.Int32
	dial := func(ctx context.Context, addr string) (net.Conn, error) {
		if addr == to {
			dials.Add(1)
			// A slow network: the answer comes after a second (within
			// moveCheckTimeout).
			select {
			case <-time.After(1500 * time.Millisecond):
				c1, c2 := net.Pipe()
				_ = c2.Close()
				return c1, nil
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		var d net.Dialer
		return d.DialContext(ctx, "tcp", addr)
	}
	a := s23Running(t, configured, dial)
	a.c.memberUp(s23Node(t, "b", configured, 1, 0), "join")
	a.c.memberUp(s23Node(t, "b", to, 2, 0), "join")
	s21Eventually(t, 10*time.Second, "the move check dials b's new address", func() bool { return dials.Load() > 0 })
	a.stop()
	select {
	case <-a.done:
	default:
		t.Fatal("Run has not returned")
	}
	stacks := func() string {
		buf := make([]byte, 1<<20)
		return string(buf[:runtime.Stack(buf, true)])
	}
	if s := stacks(); strings.Contains(s, ").checkMove(") {
		t.Errorf("Run has returned, and a checkMove goroutine still runs")
	}
	time.Sleep(3 * time.Second) // let it finish (bounded by 2 × moveCheckTimeout)
	if got := a.peerAddr("b"); got != configured {
		t.Errorf("after Run returned, the stopped node followed b from %s to %s", configured, got)
	}
}

// Found by session 23's review, now mended: every metadata update of a peer whose advertised address did not check out (an indicator epoch change, up to once a second) starts a new checkMove: this node dials the peer's advertised (and configured) address again and again for as long as it advertises it.
//
// memberUp: `else if p.movedTo != addr || !p.moveChecking` — moveChecking is
// cleared when a check ends, so the next update of the same address
// checks again; nothing remembers that this address was checked.
func TestS23AnUnconfirmedMoveIsNotRedialledOnEveryMetadataUpdate(t *testing.T) {
	configured := s23ClosedAddr(t)
	to := s23ClosedAddr(t) // unreachable from here (a NAT's address): refused at once
	var dials atomic.Int32
	dial := func(ctx context.Context, addr string) (net.Conn, error) {
		if addr == to {
			dials.Add(1)
		}
		var d net.Dialer
		return d.DialContext(ctx, "tcp", addr)
	}
	a := s23Running(t, configured, dial)
	a.c.memberUp(s23Node(t, "b", configured, 1, 0), "join")
	for epoch := uint64(1); epoch <= 10; epoch++ {
		a.c.memberUp(s23Node(t, "b", to, 1, epoch), "update") // b's indicator epoch grew
		s21Eventually(t, 10*time.Second, "the check ends", func() bool { return !s23MoveChecking(a.c, "b") })
	}
	if n := dials.Load(); n > 2 {
		t.Errorf("b advertised the same unreachable address %s in 10 metadata updates; a dialled it %d times", to, n)
	}
}

// HOLDS: a heartbeat from the address a peer advertises (movedTo) with a
// wrong MAC is refused before received(): no follow. A correctly signed
// one (the control) is followed.
func TestS23AForgedHeartbeatFromTheAdvertisedAddressIsNotFollowed(t *testing.T) {
	configured := s23ClosedAddr(t)
	// The address b advertises: a UDP socket this test sends from; no TCP
	// there, so the move check does not confirm it.
	xu, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = xu.Close() })
	x := xu.LocalAddr().String()
	a := s21Start(t, "a", map[string]string{"b": configured})
	a.c.memberUp(s23Node(t, "b", configured, 1, 0), "join")
	a.c.memberUp(s23Node(t, "b", x, 2, 0), "join")
	s21Eventually(t, 10*time.Second, "the move check ends", func() bool { return !s23MoveChecking(a.c, "b") })
	a.c.mu.Lock()
	movedTo := a.c.peers["b"].movedTo
	a.c.mu.Unlock()
	if movedTo != x {
		t.Fatalf("movedTo %q, want %q", movedTo, x)
	}
	to, err := net.ResolveUDPAddr("udp", a.addr)
	if err != nil {
		t.Fatal(err)
	}
	send := func(secret string, seq uint64) {
		h := wire.Heartbeat{Node: "b", To: "a", Incarnation: 7, Seq: seq, SendNs: time.Now().UnixNano()}
		b, err := h.Encode([]byte(secret))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := xu.WriteToUDP(b, to); err != nil {
			t.Fatal(err)
		}
	}
	send("not-the-cluster-secret", 1)
	s21Eventually(t, 10*time.Second, "a refuses the forged heartbeat", func() bool {
		return a.c.verifier.Rejections()[wire.RejectMAC] > 0
	})
	if got := a.peerAddr("b"); got != configured {
		t.Fatalf("a forged heartbeat from %s moved b there (%s)", x, got)
	}
	send(s21Secret, 2) // control: b's own heartbeat from there
	s21Eventually(t, 10*time.Second, "a follows b on its signed heartbeat from x", func() bool { return a.peerAddr("b") == x })
}

// s23Running starts node a with b configured at configured and dial for
// its move checks, and waits for its Run: memberlist calls memberUp only
// once Run runs, and a check starts only within Run, so the tests that
// call memberUp themselves wait for it too.
func s23Running(t *testing.T, configured string, dial func(ctx context.Context, addr string) (net.Conn, error)) *s21Node {
	t.Helper()
	a := s21Start(t, "a", map[string]string{"b": configured}, func(cfg *Config) { cfg.GossipDial = dial })
	s21Eventually(t, 10*time.Second, "a runs", func() bool {
		a.c.mu.Lock()
		defer a.c.mu.Unlock()
		return a.c.runCtx != nil
	})
	return a
}
