package cluster

// Membership gossip (hashicorp/memberlist, membership.go) shares the
// cluster port with the peer HTTP listener and the heartbeats, so an
// operator opens, configures and firewalls one port per node as before,
// and the addresses in cluster.peers and behind cluster.dns are the seeds
// memberlist joins. memberlist's own NetTransport binds a UDP and a TCP
// socket of its own; sharing needs a transport of ours (memberlist's
// Transport interface is built for this). Every membership packet and
// stream starts with gossipTag, which neither a heartbeat ("EHB"), an HTTP
// request (a method's capital letter) nor a TLS handshake (0x16) starts
// with: the heartbeat receiver hands tagged datagrams over (offer), and the
// peer listener hands tagged connections over (MuxListener).

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/hashicorp/go-sockaddr"
	"github.com/hashicorp/memberlist"

	"github.com/edgecache/edge/cluster/wire"
)

// gossipTag marks membership traffic on the cluster port.
const gossipTag byte = 0xEE

// gossipQueue is how many membership packets (and streams) wait for
// memberlist before more are dropped: memberlist reads them at once, so
// the queue only absorbs a burst (at most 1024 packets of up to 64 KiB).
const gossipQueue = 1024

// acceptBackoff is the pause after a failed Accept other than a closed
// listener (net/http's longest backoff).
const acceptBackoff = time.Second

// peekTimeout is how long a new peer connection may take to send its
// first byte before it is closed: peer HTTP clients and memberlist both
// write at once.
const peekTimeout = 10 * time.Second

// sharedTransport is memberlist's transport over the cluster port.
type sharedTransport struct {
	conn    wire.PacketConn // the heartbeat socket (set by Run)
	connMu  sync.RWMutex
	dial    func(ctx context.Context, addr string) (net.Conn, error)
	local   *net.TCPAddr // the cluster listener's address, for FinalAdvertiseAddr
	packets chan *memberlist.Packet
	streams chan net.Conn
	// streamMu orders acceptStream against Shutdown, so that no stream is
	// queued after Shutdown closed those waiting (memberlist no longer
	// reads them, and a stream queued before it ran would stay open).
	streamMu sync.Mutex
	stopped  bool
	done     chan struct{}
	once     sync.Once
	m        *Metrics
	// paths sends membership traffic for a configured peer, addressed to
	// the address it advertises, to the address configured for it (a
	// relay, tunnel or proxy the operator put in front of the peer), as
	// its heartbeats and peer requests go. Keyed by node name (memberlist
	// names the node it sends to: NodeAwareTransport), and applied only
	// to the advertised address it was set for, so that an address
	// another node takes over later, or one memberlist learns for this
	// node since, is never redirected. Kept apart from Cluster.mu:
	// memberlist sends from its own goroutines (setPath, memberUp).
	pathMu sync.RWMutex
	paths  map[string]gossipPath // node name →
}

// gossipPath is one configured peer's path.
type gossipPath struct{ advertised, configured string }

func newSharedTransport(dial func(ctx context.Context, addr string) (net.Conn, error), m *Metrics) *sharedTransport {
	if dial == nil {
		var d net.Dialer
		dial = func(ctx context.Context, addr string) (net.Conn, error) { return d.DialContext(ctx, "tcp", addr) }
	}
	return &sharedTransport{dial: dial, packets: make(chan *memberlist.Packet, gossipQueue), streams: make(chan net.Conn, gossipQueue), done: make(chan struct{}), m: m,
		paths: map[string]gossipPath{}}
}

// setPath sends membership traffic for node name, which advertises
// advertised, to configured ("" or the same address: directly).
func (t *sharedTransport) setPath(name, advertised, configured string) {
	t.pathMu.Lock()
	defer t.pathMu.Unlock()
	if configured == "" || configured == advertised {
		delete(t.paths, name)
		return
	}
	t.paths[name] = gossipPath{advertised: advertised, configured: configured}
}

// path is where membership traffic for the node name at addr goes.
func (t *sharedTransport) path(name, addr string) string {
	if name == "" {
		return addr
	}
	t.pathMu.RLock()
	defer t.pathMu.RUnlock()
	if p, ok := t.paths[name]; ok && p.advertised == addr {
		return p.configured
	}
	return addr
}

var _ memberlist.NodeAwareTransport = (*sharedTransport)(nil)

// WriteToAddress sends one membership packet to a named node, by its path.
func (t *sharedTransport) WriteToAddress(b []byte, a memberlist.Address) (time.Time, error) {
	return t.WriteTo(b, t.path(a.Name, a.Addr))
}

// DialAddressTimeout opens a membership stream to a named node, by its path.
func (t *sharedTransport) DialAddressTimeout(a memberlist.Address, timeout time.Duration) (net.Conn, error) {
	return t.DialTimeout(t.path(a.Name, a.Addr), timeout)
}

var _ memberlist.Transport = (*sharedTransport)(nil)

// setConn gives the transport the heartbeat socket to send on.
func (t *sharedTransport) setConn(c wire.PacketConn) {
	t.connMu.Lock()
	t.conn = c
	t.connMu.Unlock()
}

// FinalAdvertiseAddr is the configured address, else the cluster
// listener's, else (bound to every interface) a private address of this
// host, as memberlist's NetTransport chooses.
func (t *sharedTransport) FinalAdvertiseAddr(ip string, port int) (net.IP, int, error) {
	if ip != "" {
		parsed := net.ParseIP(ip)
		if parsed == nil {
			return nil, 0, fmt.Errorf("advertise address %q is not an IP address", ip)
		}
		return parsed, port, nil
	}
	var addr net.IP
	if t.local != nil {
		addr, port = t.local.IP, t.local.Port
	} else {
		t.connMu.RLock()
		if t.conn != nil {
			if u, ok := t.conn.LocalAddr().(*net.UDPAddr); ok {
				addr, port = u.IP, u.Port
			}
		}
		t.connMu.RUnlock()
	}
	if addr == nil || addr.IsUnspecified() {
		s, err := sockaddr.GetPrivateIP()
		if err != nil || s == "" {
			return nil, 0, fmt.Errorf("no private address to advertise (set cluster.advertise): %v", err)
		}
		addr = net.ParseIP(s)
	}
	return addr, port, nil
}

// WriteTo sends one tagged membership packet.
func (t *sharedTransport) WriteTo(b []byte, addr string) (time.Time, error) {
	t.connMu.RLock()
	conn := t.conn
	t.connMu.RUnlock()
	if conn == nil {
		return time.Time{}, errors.New("cluster: membership transport not running")
	}
	to, err := net.ResolveUDPAddr("udp", addr)
	if err != nil {
		return time.Time{}, fmt.Errorf("cluster: membership address: %w", err)
	}
	buf := make([]byte, 1+len(b))
	buf[0] = gossipTag
	copy(buf[1:], b)
	if _, err := conn.WriteToUDP(buf, to); err != nil {
		return time.Time{}, fmt.Errorf("cluster: membership packet: %w", err)
	}
	t.m.GossipPackets.WithLabelValues("sent").Inc()
	t.m.GossipBytes.WithLabelValues("sent").Add(float64(len(buf)))
	return time.Now(), nil
}

// offer claims a tagged datagram read from the heartbeat socket.
func (t *sharedTransport) offer(b []byte, from *net.UDPAddr, at time.Time) bool {
	if len(b) == 0 || b[0] != gossipTag {
		return false
	}
	t.m.GossipPackets.WithLabelValues("received").Inc()
	t.m.GossipBytes.WithLabelValues("received").Add(float64(len(b)))
	p := &memberlist.Packet{Buf: bytes.Clone(b[1:]), From: from, Timestamp: at}
	select {
	case t.packets <- p:
	default:
		t.m.GossipDropped.Inc()
	}
	return true
}

func (t *sharedTransport) PacketCh() <-chan *memberlist.Packet { return t.packets }

// DialTimeout opens a tagged stream to a peer's cluster port.
func (t *sharedTransport) DialTimeout(addr string, timeout time.Duration) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	c, err := t.dial(ctx, addr)
	if err != nil {
		return nil, fmt.Errorf("cluster: membership stream to %s: %w", addr, err)
	}
	_ = c.SetWriteDeadline(time.Now().Add(timeout))
	if _, err := c.Write([]byte{gossipTag}); err != nil {
		_ = c.Close()
		return nil, fmt.Errorf("cluster: membership stream to %s: %w", addr, err)
	}
	_ = c.SetWriteDeadline(time.Time{})
	return c, nil
}

// acceptStream hands memberlist a stream whose tag was read.
func (t *sharedTransport) acceptStream(c net.Conn) {
	t.streamMu.Lock()
	defer t.streamMu.Unlock()
	if t.stopped {
		_ = c.Close()
		return
	}
	select {
	case t.streams <- c:
	default:
		t.m.GossipDropped.Inc()
		_ = c.Close()
	}
}

func (t *sharedTransport) StreamCh() <-chan net.Conn { return t.streams }

// Shutdown stops handing streams over; the sockets belong to the node.
func (t *sharedTransport) Shutdown() error {
	t.once.Do(func() { close(t.done) })
	t.streamMu.Lock()
	defer t.streamMu.Unlock()
	t.stopped = true
	for {
		select {
		case c := <-t.streams:
			_ = c.Close()
		default:
			return nil
		}
	}
}

// MuxListener returns ln with membership streams taken out: Accept
// returns the other connections (peer HTTP, or TLS under it), each with
// its first byte put back. Wrap the raw TCP listener, before TLS.
func (c *Cluster) MuxListener(ln net.Listener) net.Listener {
	if a, ok := ln.Addr().(*net.TCPAddr); ok {
		c.transport.local = a
	}
	m := &muxListener{Listener: ln, t: c.transport, conns: make(chan net.Conn), done: make(chan struct{})}
	go m.run()
	return m
}

type muxListener struct {
	net.Listener
	t     *sharedTransport
	conns chan net.Conn
	err   error // the inner listener's, if it failed first (set before done closes)
	done  chan struct{}
	once  sync.Once
}

func (m *muxListener) run() {
	for {
		c, err := m.Listener.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				m.once.Do(func() { m.err = err; close(m.done) })
				return
			}
			// Anything else (EMFILE under a connection flood, a timeout)
			// passes: back off and accept again, as net/http does, so one
			// bad moment does not close the cluster port for good.
			select {
			case <-m.done:
				return
			case <-time.After(acceptBackoff):
			}
			continue
		}
		go m.sort(c)
	}
}

// sort hands a new connection to memberlist or to Accept.
func (m *muxListener) sort(c net.Conn) {
	other, ok := m.t.sortStream(c)
	if !ok {
		return
	}
	select {
	case m.conns <- other:
	case <-m.done:
		_ = other.Close()
	}
}

// sortStream reads a new connection's first byte: a membership stream is
// handed to memberlist; any other is returned with the byte put back
// (ok false: closed, or taken).
func (t *sharedTransport) sortStream(c net.Conn) (other net.Conn, ok bool) {
	_ = c.SetReadDeadline(time.Now().Add(peekTimeout))
	var first [1]byte
	if _, err := io.ReadFull(c, first[:]); err != nil {
		_ = c.Close()
		return nil, false
	}
	_ = c.SetReadDeadline(time.Time{})
	if first[0] == gossipTag {
		t.acceptStream(c)
		return nil, false
	}
	return &prefixConn{Conn: c, prefix: first[:]}, true
}

func (m *muxListener) Accept() (net.Conn, error) {
	select {
	case c := <-m.conns:
		return c, nil
	case <-m.done:
		if m.err != nil {
			return nil, m.err
		}
		return nil, net.ErrClosed
	}
}

func (m *muxListener) Close() error {
	m.once.Do(func() { close(m.done) })
	return m.Listener.Close()
}

// prefixConn replays bytes already read from a connection.
type prefixConn struct {
	net.Conn
	prefix []byte
}

// WriteConn is the connection writes go to: prefixConn changes only
// reads, and a writer of several buffers (node's batchConn) needs the
// *net.TCPConn itself for one writev (net.Buffers falls back to a write
// per buffer on any other type).
func (p *prefixConn) WriteConn() net.Conn { return p.Conn }

func (p *prefixConn) Read(b []byte) (int, error) {
	if len(p.prefix) > 0 {
		n := copy(b, p.prefix)
		p.prefix = p.prefix[n:]
		return n, nil
	}
	return p.Conn.Read(b)
}
