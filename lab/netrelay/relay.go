// Package netrelay puts a misbehaving network between two processes on
// loopback: a relay listens on one address (TCP and UDP on the same port,
// as an edge cluster listener does) and forwards to a target, adding delay,
// jitter and loss, or dropping everything (a partition), changeable while
// it runs. It counts the bytes it carries, so a lab can measure traffic
// between "regions".
//
// This kernel has no netem qdisc, so the faults live in user space.
// toxiproxy does this for TCP only and through its own HTTP API; the
// cluster's heartbeats are UDP, and a lab wants one object per link with
// both, driven from Go, so this small relay is hand-written.
package netrelay

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"
)

// Faults is what a link does to the traffic it carries. Delay applies to
// each direction (one way), so a round trip gains 2 × Delay.
type Faults struct {
	Delay  time.Duration // added to every datagram and every TCP chunk, each way
	Jitter time.Duration // uniform extra delay in [0, Jitter); order is kept on TCP
	Loss   float64       // share of UDP datagrams dropped (TCP is reliable: never dropped)
	Down   bool          // drop all UDP; refuse new TCP connections and stall open ones
}

// Network opens the relay's sockets. The default is the process's own
// network; a lab passes a namespace's (lab/netns.Host), so that the relay
// sits inside a host and its traffic leaves from the host's address.
type Network interface {
	Listen(network, addr string) (net.Listener, error)
	ListenUDP(addr *net.UDPAddr) (*net.UDPConn, error)
	DialUDP(raddr *net.UDPAddr) (*net.UDPConn, error)
	DialContext(ctx context.Context, network, addr string) (net.Conn, error)
}

type hostNetwork struct{}

func (hostNetwork) Listen(network, addr string) (net.Listener, error) {
	return net.Listen(network, addr)
}
func (hostNetwork) ListenUDP(addr *net.UDPAddr) (*net.UDPConn, error) {
	return net.ListenUDP("udp", addr)
}
func (hostNetwork) DialUDP(raddr *net.UDPAddr) (*net.UDPConn, error) {
	return net.DialUDP("udp", nil, raddr)
}
func (hostNetwork) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	return (&net.Dialer{}).DialContext(ctx, network, addr)
}

// Relay is one link: listen → target.
type Relay struct {
	network Network
	tee     atomic.Pointer[net.UDPConn]
	target  string
	faults  atomic.Pointer[Faults]
	tcp     net.Listener
	udp     *net.UDPConn
	out     *net.UDPConn // UDP towards the target
	// Bytes carried towards the target and back (TCP and UDP payloads).
	Forward, Backward atomic.Int64
	// Dropped counts UDP datagrams lost to Loss or Down.
	Dropped atomic.Int64
	wg      sync.WaitGroup
	mu      sync.Mutex
	conns   map[net.Conn]struct{}
	closed  chan struct{}
}

// Listen starts a relay on listen (host:port; port 0 picks one, the same
// for TCP and UDP) towards target.
func Listen(listen, target string, f Faults) (*Relay, error) {
	return ListenOn(hostNetwork{}, listen, target, f)
}

// ListenOn is Listen with the sockets opened on network n.
func ListenOn(n Network, listen, target string, f Faults) (*Relay, error) {
	r := &Relay{network: n, target: target, conns: map[net.Conn]struct{}{}, closed: make(chan struct{})}
	r.faults.Store(&f)
	var err error
	for range 20 { // port 0: find a port free for both protocols
		if r.tcp, err = n.Listen("tcp", listen); err != nil {
			return nil, fmt.Errorf("netrelay: %w", err)
		}
		if r.udp, err = n.ListenUDP(net.UDPAddrFromAddrPort(r.tcp.Addr().(*net.TCPAddr).AddrPort())); err == nil {
			break
		}
		_ = r.tcp.Close()
	}
	if err != nil {
		return nil, fmt.Errorf("netrelay: %w", err)
	}
	ta, err := net.ResolveUDPAddr("udp", target)
	if err != nil {
		r.Close()
		return nil, fmt.Errorf("netrelay: target: %w", err)
	}
	if r.out, err = n.DialUDP(ta); err != nil {
		r.Close()
		return nil, fmt.Errorf("netrelay: %w", err)
	}
	r.wg.Add(2)
	go r.acceptTCP()
	go r.relayUDP()
	return r, nil
}

// Addr is the relay's address (TCP and UDP).
func (r *Relay) Addr() string { return r.tcp.Addr().String() }

// UDPAddrPort is the relay's UDP address.
func (r *Relay) UDPAddrPort() netip.AddrPort { return r.udp.LocalAddr().(*net.UDPAddr).AddrPort() }

// Set replaces the faults; it applies to traffic from now on.
func (r *Relay) Set(f Faults) { r.faults.Store(&f) }

// Tee sends a copy of every datagram the relay delivers (after loss and
// delay) to addr too: a recorder sees the heartbeats exactly as the target
// receives them.
func (r *Relay) Tee(addr string) error {
	a, err := net.ResolveUDPAddr("udp", addr)
	if err != nil {
		return fmt.Errorf("netrelay: tee: %w", err)
	}
	c, err := r.network.DialUDP(a)
	if err != nil {
		return fmt.Errorf("netrelay: tee: %w", err)
	}
	if old := r.tee.Swap(c); old != nil {
		_ = old.Close()
	}
	return nil
}

// Faults returns the current faults.
func (r *Relay) Faults() Faults { return *r.faults.Load() }

// Close stops the relay and closes every connection it carries.
func (r *Relay) Close() {
	select {
	case <-r.closed:
		return
	default:
	}
	close(r.closed)
	if r.tcp != nil {
		_ = r.tcp.Close()
	}
	if r.udp != nil {
		_ = r.udp.Close()
	}
	if r.out != nil {
		_ = r.out.Close()
	}
	if t := r.tee.Swap(nil); t != nil {
		_ = t.Close()
	}
	r.mu.Lock()
	for c := range r.conns {
		_ = c.Close()
	}
	r.mu.Unlock()
	r.wg.Wait()
}

func (r *Relay) wait(f *Faults) time.Duration {
	d := f.Delay
	if f.Jitter > 0 {
		d += rand.N(f.Jitter)
	}
	return d
}

func (r *Relay) relayUDP() {
	defer r.wg.Done()
	buf := make([]byte, 64<<10)
	for {
		n, _, err := r.udp.ReadFromUDP(buf)
		if err != nil {
			return
		}
		f := r.faults.Load()
		if f.Down || (f.Loss > 0 && rand.Float64() < f.Loss) {
			r.Dropped.Add(1)
			continue
		}
		pkt := append([]byte(nil), buf[:n]...)
		r.Forward.Add(int64(n))
		deliver := func() {
			_, _ = r.out.Write(pkt)
			if t := r.tee.Load(); t != nil {
				_, _ = t.Write(pkt)
			}
		}
		if d := r.wait(f); d > 0 {
			time.AfterFunc(d, deliver)
		} else {
			deliver()
		}
	}
}

func (r *Relay) acceptTCP() {
	defer r.wg.Done()
	for {
		c, err := r.tcp.Accept()
		if err != nil {
			return
		}
		if r.faults.Load().Down {
			_ = c.Close() // a partition: the connection never gets through
			continue
		}
		r.wg.Add(1)
		go r.pipe(c)
	}
}

func (r *Relay) track(c net.Conn, on bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if on {
		r.conns[c] = struct{}{}
	} else {
		delete(r.conns, c)
	}
}

func (r *Relay) pipe(client net.Conn) {
	defer r.wg.Done()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	server, err := r.network.DialContext(ctx, "tcp", r.target)
	cancel()
	if err != nil {
		_ = client.Close()
		return
	}
	r.track(client, true)
	r.track(server, true)
	var done sync.WaitGroup
	done.Add(2)
	go func() { defer done.Done(); r.copy(server, client, &r.Forward) }()
	go func() { defer done.Done(); r.copy(client, server, &r.Backward) }()
	done.Wait()
	r.track(client, false)
	r.track(server, false)
	_ = client.Close()
	_ = server.Close()
}

// chunk is bytes read at a time, released at due.
type chunk struct {
	b   []byte
	due time.Time
}

// copy moves src → dst, each chunk held until its due time (read time plus
// the link's delay). A reader and a writer goroutine with a queue between
// them keep the bytes in order and the pipe full, as a long fat link does.
// While the link is down, bytes wait.
func (r *Relay) copy(dst, src net.Conn, count *atomic.Int64) {
	q := make(chan chunk, 1024)
	go func() {
		defer close(q)
		last := time.Time{}
		for {
			buf := make([]byte, 32<<10)
			n, err := src.Read(buf)
			if n > 0 {
				due := time.Now().Add(r.wait(r.faults.Load()))
				if due.Before(last) {
					due = last // jitter never reorders a stream
				}
				last = due
				select {
				case q <- chunk{buf[:n], due}:
				case <-r.closed:
					return
				}
			}
			if err != nil {
				return
			}
		}
	}()
	for c := range q {
		if d := time.Until(c.due); d > 0 {
			time.Sleep(d)
		}
		for r.faults.Load().Down {
			select {
			case <-r.closed:
				return
			case <-time.After(10 * time.Millisecond):
			}
		}
		// Counted before the write, so a reader that has every byte also
		// sees them counted.
		count.Add(int64(len(c.b)))
		if _, err := dst.Write(c.b); err != nil {
			_ = src.Close()
			return
		}
	}
	// The source finished: pass the half-close on.
	if tcp, ok := dst.(*net.TCPConn); ok {
		_ = tcp.CloseWrite()
	}
}
