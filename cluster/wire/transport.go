package wire

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"
)

// Received is an accepted heartbeat with its local arrival time.
type Received struct {
	Heartbeat
	RecvNs int64
	From   *net.UDPAddr
}

// Receive reads heartbeats from conn until ctx ends, verifies each, and
// calls deliver for the accepted ones. Rejections are counted by v and,
// if rejected is set, reported with their sender (so that a wrong secret
// can be logged); seen, if set, is told the size of every packet read
// (for traffic metrics).
func Receive(ctx context.Context, conn PacketConn, v *Verifier, deliver func(Received), seen func(bytes int), rejected func(from *net.UDPAddr, err error)) error {
	return ReceiveShared(ctx, conn, v, deliver, seen, rejected, nil)
}

// ReceiveShared is Receive on a socket shared with another protocol:
// other, if set, is offered every packet first, with its arrival time,
// and keeps those it claims (it must copy what it keeps; the buffer is
// reused). The cluster's membership gossip shares the heartbeat port
// this way (cluster/transport.go).
func ReceiveShared(ctx context.Context, conn PacketConn, v *Verifier, deliver func(Received), seen func(bytes int), rejected func(from *net.UDPAddr, err error),
	other func(b []byte, from *net.UDPAddr, at time.Time) bool) error {
	go func() {
		<-ctx.Done()
		_ = conn.SetReadDeadline(time.Unix(1, 0)) // unblock ReadFromUDP
	}()
	// A heartbeat is at most MaxPacket (a longer one is refused), but
	// the protocol sharing the socket may send up to a datagram's size.
	size := MaxPacket + 1
	if other != nil {
		size = 65536
	}
	buf := make([]byte, size)
	for {
		n, from, err := conn.ReadFromUDP(buf)
		now := time.Now().UnixNano()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return fmt.Errorf("fdetect: receive: %w", err)
		}
		if other != nil && other(buf[:n], from, time.Unix(0, now)) {
			continue
		}
		if seen != nil {
			seen(n)
		}
		h, err := v.Verify(buf[:n], now)
		if err != nil {
			if rejected != nil {
				rejected(from, err)
			}
			continue
		}
		deliver(Received{Heartbeat: h, RecvNs: now, From: from})
	}
}

// Sender sends a heartbeat to every target each period. Fill, if set, adds
// per-target fields (echo, indicator epoch) before each send.
type Sender struct {
	Node        string
	Incarnation uint64
	Secret      []byte
	Period      time.Duration
	Fill        func(target string, h *Heartbeat)
	Sent        func(bytes int) // if set, told the size of every packet sent
	// Refused, if set, is told of a heartbeat to target that could not
	// be encoded (an id longer than MaxIDLen); the other targets still get
	// theirs. Until 2026-12-07 one such target stopped the sender, and
	// with it the node.
	Refused func(target string, err error)

	mu  sync.Mutex
	seq uint64
}

// Run sends until ctx ends. targets maps a peer id to its UDP address;
// each heartbeat names the id it is sent to (Heartbeat.To).
func (s *Sender) Run(ctx context.Context, conn PacketConn, targets func() map[string]*net.UDPAddr) error {
	t := time.NewTicker(s.Period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		s.mu.Lock()
		s.seq++
		seq := s.seq
		s.mu.Unlock()
		for id, addr := range targets() {
			h := Heartbeat{Node: s.Node, To: id, Incarnation: s.Incarnation, Seq: seq, SendNs: time.Now().UnixNano()}
			if s.Fill != nil {
				s.Fill(id, &h)
			}
			b, err := h.Encode(s.Secret)
			if err != nil {
				if s.Refused != nil {
					s.Refused(id, err)
				}
				continue
			}
			// A send error (peer down, no route) is the failure detector's
			// business, not ours: keep sending to the others.
			if _, err := conn.WriteToUDP(b, addr); err == nil && s.Sent != nil {
				s.Sent(len(b))
			}
		}
	}
}
