package wire

import (
	"net"
	"os"
	"sync"
	"time"
)

// PacketConn is what the heartbeat transport needs of a socket: a
// *net.UDPConn, or a MemConn of an in-memory network.
type PacketConn interface {
	ReadFromUDP(b []byte) (int, *net.UDPAddr, error)
	WriteToUDP(b []byte, addr *net.UDPAddr) (int, error)
	SetReadDeadline(t time.Time) error
	LocalAddr() net.Addr
	Close() error
}

var _ PacketConn = (*net.UDPConn)(nil)

// MemNetwork is an in-memory datagram network for tests, as memberlist's
// MockNetwork is: nodes in one process exchange heartbeats without
// sockets, so a test neither races other processes for ports nor loses
// packets to a busy kernel, and it can cut links exactly (Cut). Like UDP,
// a packet to an address nobody listens on, over a cut link, or to a full
// queue is dropped without an error.
type MemNetwork struct {
	mu       sync.Mutex
	conns    map[string]*MemConn
	cut      map[[2]string]bool // from → to links that drop every packet
	nextPort int                // the port given to the next ":0"
	delay    time.Duration      // added to every datagram (SetDelay)
	drop     func(from, to string, b []byte) bool
	streams  map[string]func(net.Conn)
}

// NewMemNetwork returns an empty network.
func NewMemNetwork() *MemNetwork {
	return &MemNetwork{conns: map[string]*MemConn{}, cut: map[[2]string]bool{}, nextPort: 20000}
}

// memQueue is how many packets wait for a reader before more are dropped
// (a socket's receive buffer).
const memQueue = 1024

// Listen binds addr ("127.0.0.1:7001"; any host:port names it; port 0
// takes one not used yet). A closed address may be bound again (a node
// that restarts).
func (n *MemNetwork) Listen(addr string) (*MemConn, error) {
	ua, err := net.ResolveUDPAddr("udp", addr)
	if err != nil {
		return nil, err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if ua.Port == 0 {
		for {
			n.nextPort++
			ua.Port = n.nextPort
			if _, taken := n.conns[ua.String()]; !taken {
				break
			}
		}
	}
	if _, taken := n.conns[ua.String()]; taken {
		return nil, &net.OpError{Op: "listen", Net: "mem", Addr: ua, Err: os.ErrExist}
	}
	c := &MemConn{n: n, addr: ua, in: make(chan memPacket, memQueue), closed: make(chan struct{}), wake: make(chan struct{})}
	n.conns[ua.String()] = c
	return c, nil
}

// Cut drops every packet from one address to another (both "host:port")
// until Heal; cut both ways for a partition.
func (n *MemNetwork) Cut(from, to string) { n.setCut(from, to, true) }

// Heal undoes Cut.
func (n *MemNetwork) Heal(from, to string) { n.setCut(from, to, false) }

func (n *MemNetwork) setCut(from, to string, cut bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if cut {
		n.cut[[2]string{from, to}] = true
	} else {
		delete(n.cut, [2]string{from, to})
	}
}

// SetDelay holds every datagram sent from now on for d before it is
// delivered (0: at once), on every link, as the fault lab's relays do: a
// datagram sent after the delay ends can arrive before one held up by it.
func (n *MemNetwork) SetDelay(d time.Duration) {
	n.mu.Lock()
	n.delay = d
	n.mu.Unlock()
}

// SetFilter drops every datagram for which drop returns true (nil: none),
// for tests that lose chosen packets on chosen links.
func (n *MemNetwork) SetFilter(drop func(from, to string, b []byte) bool) {
	n.mu.Lock()
	n.drop = drop
	n.mu.Unlock()
}

type memPacket struct {
	b    []byte
	from *net.UDPAddr
}

// MemConn is one bound address of a MemNetwork.
type MemConn struct {
	n      *MemNetwork
	addr   *net.UDPAddr
	in     chan memPacket
	closed chan struct{}
	once   sync.Once

	mu       sync.Mutex
	deadline time.Time
	wake     chan struct{} // closed and replaced when the deadline changes
}

// ReadFromUDP waits for the next packet, the read deadline, or Close.
func (c *MemConn) ReadFromUDP(b []byte) (int, *net.UDPAddr, error) {
	for {
		c.mu.Lock()
		deadline, wake := c.deadline, c.wake
		c.mu.Unlock()
		var timer *time.Timer
		var expired <-chan time.Time
		if !deadline.IsZero() {
			d := time.Until(deadline)
			if d <= 0 {
				return 0, nil, os.ErrDeadlineExceeded
			}
			timer = time.NewTimer(d)
			expired = timer.C
		}
		var p memPacket
		var err error
		got := false
		select {
		case p = <-c.in:
			got = true
		case <-c.closed:
			err = net.ErrClosed
		case <-expired:
			err = os.ErrDeadlineExceeded
		case <-wake: // the deadline moved: wait again under the new one
		}
		if timer != nil {
			timer.Stop()
		}
		if got {
			return copy(b, p.b), p.from, nil
		}
		if err != nil {
			return 0, nil, err
		}
	}
}

// WriteToUDP sends b to addr.
func (c *MemConn) WriteToUDP(b []byte, addr *net.UDPAddr) (int, error) {
	select {
	case <-c.closed:
		return 0, net.ErrClosed
	default:
	}
	n := c.n
	n.mu.Lock()
	to := n.conns[addr.String()]
	cut := n.cut[[2]string{c.addr.String(), addr.String()}]
	delay, drop := n.delay, n.drop
	n.mu.Unlock()
	if to == nil || cut || (drop != nil && drop(c.addr.String(), addr.String(), b)) {
		return len(b), nil
	}
	p := memPacket{b: append([]byte(nil), b...), from: c.addr}
	deliver := func() {
		select {
		case to.in <- p:
		case <-to.closed:
		default: // a full receive queue drops, as a socket buffer does
		}
	}
	if delay > 0 {
		time.AfterFunc(delay, deliver)
	} else {
		deliver()
	}
	return len(b), nil
}

// SetReadDeadline implements PacketConn.
func (c *MemConn) SetReadDeadline(t time.Time) error {
	c.mu.Lock()
	c.deadline = t
	close(c.wake)
	c.wake = make(chan struct{})
	c.mu.Unlock()
	return nil
}

// LocalAddr is the bound address.
func (c *MemConn) LocalAddr() net.Addr { return c.addr }

// Close unbinds the address; later packets to it are dropped.
func (c *MemConn) Close() error {
	c.once.Do(func() {
		close(c.closed)
		c.n.mu.Lock()
		if c.n.conns[c.addr.String()] == c {
			delete(c.n.conns, c.addr.String())
		}
		c.n.mu.Unlock()
	})
	return nil
}

// HandleStreams makes addr accept in-memory streams (the TCP side of a
// node's cluster port: memberlist's push/pull and joins); accept gets the
// server end of each. nil stops accepting (a node that stops).
func (n *MemNetwork) HandleStreams(addr string, accept func(net.Conn)) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.streams == nil {
		n.streams = map[string]func(net.Conn){}
	}
	if accept == nil {
		delete(n.streams, addr)
		return
	}
	n.streams[addr] = accept
}

// DialStream opens a stream from one address to another. It is refused
// when nothing accepts at to, or when either direction is cut (a stream
// needs both).
func (n *MemNetwork) DialStream(from, to string) (net.Conn, error) {
	n.mu.Lock()
	accept := n.streams[to]
	cut := n.cut[[2]string{from, to}] || n.cut[[2]string{to, from}]
	n.mu.Unlock()
	if accept == nil || cut {
		return nil, &net.OpError{Op: "dial", Net: "mem", Err: os.ErrDeadlineExceeded}
	}
	fa, _ := net.ResolveTCPAddr("tcp", from)
	ta, _ := net.ResolveTCPAddr("tcp", to)
	client, server := net.Pipe()
	go accept(memStream{Conn: server, local: ta, remote: fa})
	return memStream{Conn: client, local: fa, remote: ta}, nil
}

// memStream is one end of an in-memory stream, with the addresses a TCP
// connection would report.
type memStream struct {
	net.Conn
	local, remote net.Addr
}

func (s memStream) LocalAddr() net.Addr  { return s.local }
func (s memStream) RemoteAddr() net.Addr { return s.remote }
