package netns

import (
	"context"
	"fmt"
	"io"
	"net"
	"testing"
	"time"

	"github.com/edgecache/edge/internal/prereq"
	"github.com/edgecache/edge/lab/netrelay"
)

func newLab(t *testing.T, names ...string) *Lab {
	t.Helper()
	if err := Check(); err != nil {
		prereq.Missing(t, "network namespaces and nftables (root)", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	l, err := New(ctx, fmt.Sprintf("nt%d", time.Now().UnixNano()%10000), names)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.Close)
	return l
}

// echoIn serves TCP echo inside h.
func echoIn(t *testing.T, h *Host, port int) {
	t.Helper()
	ln, err := h.Listen("tcp", fmt.Sprintf("%s:%d", h.Addr, port))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { _, _ = io.Copy(c, c); _ = c.Close() }()
		}
	}()
}

func roundTrip(h *Host, addr string) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	c, err := h.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("ping")); err != nil {
		return err
	}
	buf := make([]byte, 4)
	_, err = io.ReadFull(c, buf)
	return err
}

// TestHostsTalkAndNftPartitions: two hosts reach each other over the
// bridge, an nftables drop in one namespace cuts exactly the direction it
// names, and Close leaves no namespace behind.
func TestHostsTalkAndNftPartitions(t *testing.T) {
	l := newLab(t, "a", "b")
	a, b := l.Host("a"), l.Host("b")
	echoIn(t, a, 7000)
	target := fmt.Sprintf("%s:7000", a.Addr)
	if err := roundTrip(b, target); err != nil {
		t.Fatalf("b → a before any fault: %v", err)
	}
	if err := a.Nft(context.Background(), fmt.Sprintf("table inet lab {\n chain in {\n  type filter hook input priority 0;\n  ip saddr %s drop\n }\n}\n", b.Addr)); err != nil {
		t.Fatal(err)
	}
	if err := roundTrip(b, target); err == nil {
		t.Fatal("b reached a through a drop rule")
	}
	if err := a.Nft(context.Background(), "delete table inet lab\n"); err != nil {
		t.Fatal(err)
	}
	if err := roundTrip(b, target); err != nil {
		t.Fatalf("b → a after the rule went: %v", err)
	}
	l.Close()
	out, _ := runOut("ip", "netns", "list")
	for _, h := range l.Hosts() {
		if containsWord(out, h.NS) {
			t.Errorf("namespace %s left after Close", h.NS)
		}
	}
}

// TestRelayInsideAHost: a relay opened in host b forwards to a, and a
// sees the traffic come from b's address (so nftables rules about b apply).
func TestRelayInsideAHost(t *testing.T) {
	l := newLab(t, "a", "b")
	a, b := l.Host("a"), l.Host("b")
	ln, err := a.Listen("tcp", fmt.Sprintf("%s:7001", a.Addr))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	from := make(chan string, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		from <- c.RemoteAddr().(*net.TCPAddr).IP.String()
		_, _ = io.Copy(c, c)
		_ = c.Close()
	}()
	// a UDP target too, so the relay's UDP side has somewhere to send
	u, err := a.ListenUDP(&net.UDPAddr{IP: a.Addr.AsSlice(), Port: 7001})
	if err != nil {
		t.Fatal(err)
	}
	defer u.Close()
	r, err := netrelay.ListenOn(b, "127.0.0.1:0", fmt.Sprintf("%s:7001", a.Addr), netrelay.Faults{Delay: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if err := roundTrip(b, r.Addr()); err != nil {
		t.Fatalf("through the relay: %v", err)
	}
	if got := <-from; got != b.Addr.String() {
		t.Errorf("a saw the relay's traffic from %s, want b's %s", got, b.Addr)
	}
	ub, err := b.DialUDP(net.UDPAddrFromAddrPort(r.UDPAddrPort()))
	if err != nil {
		t.Fatal(err)
	}
	defer ub.Close()
	_, _ = ub.Write([]byte("hb"))
	_ = u.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 16)
	n, src, err := u.ReadFromUDP(buf)
	if err != nil || string(buf[:n]) != "hb" || src.IP.String() != b.Addr.String() {
		t.Fatalf("datagram %q from %v (%v); want hb from %s", buf[:n], src, err, b.Addr)
	}
}
