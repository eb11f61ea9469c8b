package node

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
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
	// A QUIC connection over the share is refused from its first packet,
	// before a handshake the node would pay for (it was closed once
	// accepted, with H3_EXCESSIVE_LOAD, after a whole TLS handshake).
	refusedBefore := testutil.ToFloat64(n.conns.refusedInitials.WithLabelValues(refusedPerClient))
	q2, err := quic.DialAddr(ctx, h3Addr(n), h3TLS(), nil)
	var te *quic.TransportError
	if !errors.As(err, &te) || te.ErrorCode != quic.ConnectionRefused {
		t.Errorf("a QUIC connection over the share: %v, want CONNECTION_REFUSED before its handshake", err)
		if err == nil {
			_ = q2.CloseWithError(0, "")
		}
	}
	if got := testutil.ToFloat64(n.conns.refusedInitials.WithLabelValues(refusedPerClient)) - refusedBefore; got < 1 || got > 2 {
		t.Errorf("%v Initial packets counted refused for one QUIC connection, want its first flight's (1 or 2)", got)
	}
	if got := n.conns.Open(); got != 2 {
		t.Errorf("open %d, want 2", got)
	}
	_ = q.CloseWithError(0, "")
	s11WaitOpen(t, n, 1, 10*time.Second) // patient: a QUIC close is seen late on a busy machine
	c1.Close()
	s11WaitOpen(t, n, 0, 10*time.Second)
}
