package netrelay

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"strings"
	"testing"
	"time"
)

// echo serves TCP echo and a UDP sink on one port; it returns the address
// and a channel of datagrams received.
func echo(t *testing.T) (string, chan []byte) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	udp, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(ln.Addr().(*net.TCPAddr).AddrPort()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close(); _ = udp.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); _, _ = io.Copy(c, c) }()
		}
	}()
	got := make(chan []byte, 1000)
	go func() {
		buf := make([]byte, 2048)
		for {
			n, _, err := udp.ReadFromUDP(buf)
			if err != nil {
				return
			}
			got <- append([]byte(nil), buf[:n]...)
		}
	}()
	return ln.Addr().String(), got
}

// TestRelayDelayOrderAndBytes: a TCP round trip through the relay takes at
// least twice its one-way delay, the stream arrives whole and in order
// with jitter, UDP datagrams arrive delayed, and the bytes are counted.
func TestRelayDelayOrderAndBytes(t *testing.T) {
	target, datagrams := echo(t)
	r, err := Listen("127.0.0.1:0", target, Faults{Delay: 20 * time.Millisecond, Jitter: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	c, err := net.Dial("tcp", r.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var want bytes.Buffer
	for i := range 2000 {
		want.WriteString(strings.Repeat(string(rune('a'+i%26)), 50) + "\n")
	}
	start := time.Now()
	go func() { _, _ = c.Write(want.Bytes()) }()
	got := make([]byte, want.Len())
	if _, err := io.ReadFull(bufio.NewReader(c), got); err != nil {
		t.Fatal(err)
	}
	if rtt := time.Since(start); rtt < 40*time.Millisecond {
		t.Errorf("round trip %v through a 20 ms (one way) link", rtt)
	}
	if !bytes.Equal(got, want.Bytes()) {
		t.Fatal("the stream came back reordered or changed")
	}
	if r.Forward.Load() != int64(want.Len()) || r.Backward.Load() != int64(want.Len()) {
		t.Errorf("counted %d forward, %d back; want %d each", r.Forward.Load(), r.Backward.Load(), want.Len())
	}

	u, err := net.Dial("udp", r.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer u.Close()
	sent := time.Now()
	_, _ = u.Write([]byte("hb"))
	select {
	case d := <-datagrams:
		if string(d) != "hb" || time.Since(sent) < 20*time.Millisecond {
			t.Errorf("datagram %q after %v", d, time.Since(sent))
		}
	case <-time.After(5 * time.Second):
		t.Fatal("datagram not relayed")
	}
}

// TestRelayLossAndPartition: loss 1 drops every datagram, Down refuses new
// connections and drops datagrams, and lifting it lets traffic through.
func TestRelayLossAndPartition(t *testing.T) {
	target, datagrams := echo(t)
	r, err := Listen("127.0.0.1:0", target, Faults{Loss: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	u, err := net.Dial("udp", r.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer u.Close()
	for range 50 {
		_, _ = u.Write([]byte("lost"))
	}
	// The faults apply when the relay reads a datagram, not when it was
	// sent: wait until all 50 are read (and dropped) before changing them.
	waitDropped(t, r, 50)
	r.Set(Faults{Down: true})
	_, _ = u.Write([]byte("down"))
	waitDropped(t, r, 51)
	c, err := net.Dial("tcp", r.Addr())
	if err == nil {
		_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
		if _, err := c.Read(make([]byte, 1)); err == nil {
			t.Error("a connection got through a partition")
		}
		c.Close()
	}
	r.Set(Faults{})
	_, _ = u.Write([]byte("up"))
	select {
	case d := <-datagrams:
		if string(d) != "up" {
			t.Fatalf("first datagram through is %q: loss or the partition let one pass", d)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no datagram after the partition healed")
	}
	c, err = net.Dial("tcp", r.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, _ = c.Write([]byte("x"))
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadFull(c, make([]byte, 1)); err != nil {
		t.Fatalf("after healing: %v", err)
	}
}

func waitDropped(t *testing.T, r *Relay, n int64) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for r.Dropped.Load() < n {
		if time.Now().After(deadline) {
			t.Fatalf("relay dropped %d datagrams, want %d", r.Dropped.Load(), n)
		}
		time.Sleep(time.Millisecond)
	}
}
