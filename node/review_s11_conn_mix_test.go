package node

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/quic-go/quic-go"
)

// TestS11ConnPerClientMixesProtocols: plain, TLS and QUIC connections of
// one address count together against max_connections_per_client.
func TestS11ConnPerClientMixesProtocols(t *testing.T) {
	n := startH3Node(t, newH3Origin(t).URL, "limits: {max_connections_per_client: 2}\n")
	c1, err := net.Dial("tcp", n.PublicAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer c1.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	q, err := quic.DialAddr(ctx, h3Addr(n), h3TLS(), nil)
	if err != nil {
		t.Fatal(err)
	}
	s11WaitOpen(t, n, 2, 3*time.Second)
	c3, err := net.Dial("tcp", h3Addr(n))
	if err != nil {
		t.Fatal(err)
	}
	if !closedAtOnce(t, c3) {
		t.Error("a TLS connection over the share (one plain, one QUIC held) was kept")
	}
	c3.Close()
	q2, err := quic.DialAddr(ctx, h3Addr(n), h3TLS(), nil)
	if err == nil {
		select {
		case <-q2.Context().Done():
		case <-time.After(2 * time.Second):
			t.Error("a QUIC connection over the share was kept")
		}
	}
	if got := n.conns.Open(); got != 2 {
		t.Errorf("open %d, want 2", got)
	}
	_ = q.CloseWithError(0, "")
	s11WaitOpen(t, n, 1, 3*time.Second)
	c1.Close()
	s11WaitOpen(t, n, 0, 3*time.Second)
}
