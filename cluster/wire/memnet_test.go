package wire

import (
	"errors"
	"net"
	"os"
	"testing"
	"time"
)

func TestMemNetworkDeliversCutsAndCloses(t *testing.T) {
	n := NewMemNetwork()
	a, err := n.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b, err := n.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if a.LocalAddr().String() == b.LocalAddr().String() {
		t.Fatalf("two listeners on :0 share %v", a.LocalAddr())
	}
	if _, err := n.Listen(b.LocalAddr().String()); err == nil {
		t.Fatal("bound an address in use")
	}
	bAddr := b.LocalAddr().(*net.UDPAddr)
	read := func(c *MemConn) (string, error) {
		_ = c.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
		buf := make([]byte, 64)
		k, from, err := c.ReadFromUDP(buf)
		if err != nil {
			return "", err
		}
		if from.String() != a.LocalAddr().String() {
			t.Fatalf("from %v, want %v", from, a.LocalAddr())
		}
		return string(buf[:k]), nil
	}

	if _, err := a.WriteToUDP([]byte("one"), bAddr); err != nil {
		t.Fatal(err)
	}
	if got, err := read(b); err != nil || got != "one" {
		t.Fatalf("read %q, %v", got, err)
	}
	n.Cut(a.LocalAddr().String(), b.LocalAddr().String())
	_, _ = a.WriteToUDP([]byte("lost"), bAddr)
	if _, err := read(b); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("a cut link delivered: %v", err)
	}
	n.Heal(a.LocalAddr().String(), b.LocalAddr().String())
	_, _ = a.WriteToUDP([]byte("two"), bAddr)
	if got, err := read(b); err != nil || got != "two" {
		t.Fatalf("after Heal: %q, %v", got, err)
	}

	// A past deadline ends a read waiting now (how Receive stops).
	done := make(chan error, 1)
	_ = b.SetReadDeadline(time.Time{})
	go func() {
		_, _, err := b.ReadFromUDP(make([]byte, 8))
		done <- err
	}()
	time.Sleep(20 * time.Millisecond) // let the read start waiting (either order ends it)
	_ = b.SetReadDeadline(time.Unix(1, 0))
	if err := <-done; !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read after a past deadline: %v", err)
	}

	// Closed: packets to it are dropped, the address can be bound again.
	_ = b.Close()
	if _, err := a.WriteToUDP([]byte("nobody"), bAddr); err != nil {
		t.Fatalf("a write to nobody: %v (UDP drops silently)", err)
	}
	b2, err := n.Listen(b.LocalAddr().String())
	if err != nil {
		t.Fatalf("rebinding a closed address: %v", err)
	}
	_, _ = a.WriteToUDP([]byte("three"), bAddr)
	if got, err := read(b2); err != nil || got != "three" {
		t.Fatalf("restarted listener: %q, %v", got, err)
	}
}
