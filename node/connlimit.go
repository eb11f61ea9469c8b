package node

import (
	"crypto/tls"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/edgecache/edge/config"
	"github.com/edgecache/edge/internal/clientaddr"
)

// connLimiter bounds the clients' connections (plain and TLS TCP, and
// QUIC), in all and per client address. A connection held open costs a
// goroutine, buffers and a file descriptor: without a bound, one client
// that opens connections and sends nothing (each alive until
// limits.read_header_timeout, then idle ones until limits.idle_timeout,
// and as many again as it opens meanwhile) spends the node's descriptors,
// and then the origin fetches, the peer hops and the disk tier's files fail
// with EMFILE (the tier goes down after three). A connection over a bound
// is closed as soon as it is accepted, before anything is read from it:
// the client sees the connection close and may retry, and the node's
// descriptors stay for the work under way (nginx's worker_connections and
// limit_conn play the same part).
type connLimiter struct {
	max, perClient int // 0: no bound of that kind; under mu (a reload sets them: setBounds)

	mu     sync.Mutex
	open   int
	byAddr map[netip.Prefix]int // by client (clientaddr.Of: an IPv6 client is its /64)

	refused *prometheus.CounterVec // by reason: max, per_client

	// evicted, when set, makes room for a connection over a bound by
	// closing the oldest connection of that bound that is not in a request
	// (newAdminConnLimiter; counted here by reason), and conns holds what
	// that choice is made from: every connection admitted since.
	evicted *prometheus.CounterVec
	conns   map[*limitedConn]struct{}
	seq     uint64 // order of admission, for "oldest"
	// refusedInitials counts QUIC connection attempts refused from their
	// first packets, before a handshake (admitInitial), by reason: per
	// packet, as quic-go asks once for each Initial packet of a client's
	// first flight (two for a post-quantum ClientHello).
	refusedInitials *prometheus.CounterVec
}

// Reasons a connection is refused, the label values of
// edge_client_connections_refused_total.
const (
	refusedMax       = "max"
	refusedPerClient = "per_client"
)

// connReserve is what the default bound keeps of the open-file limit for
// everything but client connections: origin and peer connections (a few
// per limits.max_inflight slot), the disk tier's files, spool files,
// listeners and the process's own.
func connReserve(maxInflight int) int { return 1024 + 4*maxInflight }

// maxConnections is the client connection bound cfg gives.
func maxConnections(cfg *config.Config) int {
	if cfg.Limits.MaxConnections != 0 {
		return cfg.Limits.MaxConnections
	}
	return defaultMaxConnections(cfg.Limits.MaxInflight)
}

// defaultMaxConnections is limits.max_connections' 0: the open-file limit
// less connReserve, or half of it where the limit is small (a container's
// 1024), at least 64. Go raises the soft limit to the hard one at start
// (os package, since Go 1.19), so this is the hard limit.
func defaultMaxConnections(maxInflight int) int {
	nofile, ok := openFileLimit()
	if !ok {
		return 1 << 20 // unknown or unlimited: a bound nothing reaches
	}
	return maxConnectionsUnder(nofile, maxInflight)
}

// openFileLimit is the process's open-file limit, if it is known and
// below unlimited.
func openFileLimit() (int, bool) {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil || rl.Cur > 1<<30 {
		return 0, false
	}
	return int(rl.Cur), true
}

// maxConnectionsUnder is defaultMaxConnections for an open-file limit.
func maxConnectionsUnder(nofile, maxInflight int) int {
	return max(64, nofile-min(connReserve(maxInflight), nofile/2))
}

// defaultMaxPeerConnections bounds the cluster listener's connections
// from one address at half the reserve defaultMaxConnections keeps (at
// least 64): peers' connections come out of that reserve, and before this
// nothing bounded them, so anyone who reached the cluster port could hold
// connections (each until the 10 s header timeout, then again) until the
// node's origin fetches, peer hops and disk files had no descriptor left.
// Half leaves the other half to those whatever one address does. Per
// address, not in all: a global bound let a few hundred idle connections
// from a stranger shut every peer out (a review), where a share per
// address leaves the peers at other addresses theirs. A peer keeps up to
// 64 idle connections (cluster.peerIdleConns) and one per request under
// way; where descriptors are few (1,024: a bound of 256) a peer's load
// beyond it goes to the origin instead of taking the node's last
// descriptors.
func defaultMaxPeerConnections(maxInflight int) int {
	nofile, ok := openFileLimit()
	if !ok {
		return 1 << 20 // unknown or unlimited: a bound nothing reaches
	}
	return maxPeerConnectionsUnder(nofile, maxInflight)
}

// maxPeerConnectionsUnder is defaultMaxPeerConnections for an open-file limit.
func maxPeerConnectionsUnder(nofile, maxInflight int) int {
	return max(64, min(connReserve(maxInflight), nofile/2)/2)
}

// newPeerConnLimiter bounds the cluster listener's connections from one
// address (an IPv6 /64, as for clients).
func newPeerConnLimiter(perAddr int, reg prometheus.Registerer) *connLimiter {
	l := &connLimiter{perClient: perAddr, byAddr: make(map[netip.Prefix]int),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "edge_peer_connections_refused_total",
			Help: "Connections to the cluster listener closed as soon as accepted, over its bound for one address (half the descriptors the node keeps back from clients).",
		}, []string{"reason"})}
	l.refused.WithLabelValues(refusedPerClient)
	reg.MustRegister(l.refused,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "edge_peer_connections", Help: "Connections open on the cluster listener (peers' requests and membership streams)."},
			func() float64 { return float64(l.Open()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "edge_peer_connections_limit", Help: "The cluster listener's connection bound for one address in force."},
			func() float64 { _, per := l.bounds(); return float64(per) }))
	return l
}

// The admin listener's bounds (newAdminConnLimiter). Its connections come
// out of the reserve connReserve keeps for the node's own descriptors, and
// before 2026-12-06 nothing bounded them: with admin.listen off loopback
// (a Prometheus server elsewhere, an operator's browser), anyone who
// reached the port could hold connections (each until the 10 s header
// timeout, then again) until origin fetches and disk files failed. Its
// honest users are few and keep few connections: a Prometheus server one
// per node, a browser six per host, a purge or reload script a handful;
// 64 from one address leaves a script's concurrency room, and 256 in all
// (a quarter of the smallest reserve, 1,024) is far below what serving
// needs. A connection over a bound does not simply bounce, or the
// stalled connections that fill it would shut the operator out (every
// local user shares 127.0.0.1, and the review test of 300 stalled TLS
// handshakes expects the operator's to succeed among them): the oldest
// connection of that bound that is not in a request (a handshake or head
// not finished, or idle between requests) is closed to make room. Only
// connections in a request are kept, and adminRequestTimeout ends those.
const (
	adminConnectionsPerAddress = 64
	adminConnectionsMax        = 256
)

// adminRequestTimeout bounds a request on the admin listener from its
// head to its answer's last byte (http.Server ReadTimeout and
// WriteTimeout): a body that never comes or an answer never read ends
// then, and its connection with it, instead of holding a slot eviction
// cannot take. Two minutes is above any purge or reload, and pprof
// refuses a profile or trace as long (its handlers check WriteTimeout),
// where a shorter read timeout would cut one short: net/http's
// background read ends the request when it passes.
const adminRequestTimeout = 2 * time.Minute

// adminWriteByteTimeout: an HTTP/2 connection on the admin listener whose
// writes move no byte for this long is closed (http.HTTP2Config
// WriteByteTimeout).
const adminWriteByteTimeout = 30 * time.Second

// newAdminConnLimiter bounds the admin listener's connections, in all and
// per address (an IPv6 /64, as for clients).
func newAdminConnLimiter(reg prometheus.Registerer) *connLimiter {
	l := &connLimiter{max: adminConnectionsMax, perClient: adminConnectionsPerAddress, byAddr: make(map[netip.Prefix]int),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "edge_admin_connections_refused_total",
			Help: "Connections to the admin listener closed as soon as accepted, by the bound they were over (max: 256 in all; per_client: 64 from one address) when every connection of that bound was in a request.",
		}, []string{"reason"}),
		evicted: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "edge_admin_connections_evicted_total",
			Help: "Admin listener connections not in a request (a handshake or head unfinished, or idle) closed to make room for a new one over a bound, by the bound: max or per_client.",
		}, []string{"reason"}),
		conns: make(map[*limitedConn]struct{})}
	for _, r := range []string{refusedMax, refusedPerClient} {
		l.refused.WithLabelValues(r)
		l.evicted.WithLabelValues(r)
	}
	reg.MustRegister(l.refused, l.evicted,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "edge_admin_connections", Help: "Connections open on the admin listener (status page, metrics, purges, reloads)."},
			func() float64 { return float64(l.Open()) }))
	return l
}

func newConnLimiter(maxConns, perClient int, reg prometheus.Registerer) *connLimiter {
	l := &connLimiter{max: maxConns, perClient: perClient, byAddr: make(map[netip.Prefix]int),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "edge_client_connections_refused_total",
			Help: "Client connections (TCP and QUIC) closed as soon as accepted, by the bound they were over: max (limits.max_connections) or per_client (limits.max_connections_per_client).",
		}, []string{"reason"}),
		refusedInitials: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "edge_client_quic_initials_refused_total",
			Help: "QUIC Initial packets refused with CONNECTION_REFUSED before any handshake, by the bound their connection would be over: max or per_client (a client's first flight may be two packets).",
		}, []string{"reason"})}
	for _, r := range []string{refusedMax, refusedPerClient} {
		l.refused.WithLabelValues(r)
		l.refusedInitials.WithLabelValues(r)
	}
	reg.MustRegister(l.refused, l.refusedInitials,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "edge_client_connections", Help: "Client connections open (TCP and QUIC) on the public listeners."},
			func() float64 { return float64(l.Open()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "edge_client_connections_limit", Help: "limits.max_connections in force (its default: the open-file limit less a reserve)."},
			func() float64 { m, _ := l.bounds(); return float64(m) }))
	return l
}

// admit counts a new connection from addr, or reports the bound it is
// over (and counts nothing).
func (l *connLimiter) admit(addr netip.Addr) (refused string) { return l.decide(addr, l.refused) }

// admitInitial is admit for a QUIC connection at its first packet, before
// its handshake (which one refused after it had paid for): a refusal is
// counted per Initial packet (refusedInitials), and the slot taken is
// given back when the connection ends, handshake or not.
func (l *connLimiter) admitInitial(addr netip.Addr) (refused string) {
	return l.decide(addr, l.refusedInitials)
}

// decide takes a slot for addr, or counts the refusal in refusals.
func (l *connLimiter) decide(addr netip.Addr, refusals *prometheus.CounterVec) string {
	client := clientaddr.Of(addr)
	l.mu.Lock()
	defer l.mu.Unlock()
	if refused := l.overLocked(client); refused != "" {
		refusals.WithLabelValues(refused).Inc()
		return refused
	}
	l.takeLocked(client)
	return ""
}

// bounds are the limiter's bounds in force.
func (l *connLimiter) bounds() (maxConns, perClient int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.max, l.perClient
}

// setBounds changes the bounds (a reload). Connections already open stay;
// a lower bound refuses new ones until enough have closed.
func (l *connLimiter) setBounds(maxConns, perClient int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.max, l.perClient = maxConns, perClient
}

// takeLocked counts one more connection from client. Under l.mu.
func (l *connLimiter) takeLocked(client netip.Prefix) {
	l.open++
	l.byAddr[client]++
}

// overLocked reports the bound one more connection from client would be
// over, or "". Under l.mu.
func (l *connLimiter) overLocked(client netip.Prefix) string {
	switch {
	case l.max > 0 && l.open >= l.max:
		return refusedMax
	case l.perClient > 0 && l.byAddr[client] >= l.perClient:
		return refusedPerClient
	}
	return ""
}

// release gives back what admit counted for addr.
func (l *connLimiter) release(addr netip.Addr) { l.releaseConn(addr, nil) }

// releaseConn is release for a connection the listener admitted (c, which
// eviction no longer chooses from), or for a slot alone (nil).
func (l *connLimiter) releaseConn(addr netip.Addr, c *limitedConn) {
	client := clientaddr.Of(addr)
	l.mu.Lock()
	defer l.mu.Unlock()
	if c != nil {
		delete(l.conns, c)
	}
	l.open--
	if n := l.byAddr[client] - 1; n > 0 {
		l.byAddr[client] = n
	} else {
		delete(l.byAddr, client) // the map holds only clients with connections open
	}
}

// Open is the number of connections counted.
func (l *connLimiter) Open() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.open
}

// listener wraps a TCP listener: connections over a bound are closed
// once accepted and never returned.
func (l *connLimiter) listener(ln net.Listener) net.Listener {
	return &limitListener{Listener: ln, l: l}
}

type limitListener struct {
	net.Listener
	l *connLimiter
}

func (ll *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := ll.Listener.Accept()
		if err != nil {
			return nil, err
		}
		tc, ok := c.(*net.TCPConn)
		if !ok {
			return c, nil // not a client's TCP connection: nothing to bound
		}
		addr := ipOf(c.RemoteAddr())
		lc, ok := ll.l.admitConn(tc, addr)
		if !ok {
			_ = c.Close()
			continue
		}
		return lc, nil
	}
}

// admitConn admits a TCP connection from addr, making room for it by
// eviction where the limiter evicts; false: it is over a bound (counted).
func (l *connLimiter) admitConn(tc *net.TCPConn, addr netip.Addr) (*limitedConn, bool) {
	if l.evicted == nil {
		if l.admit(addr) != "" {
			return nil, false
		}
		return &limitedConn{TCPConn: tc, release: func() { l.release(addr) }}, true
	}
	client := clientaddr.Of(addr)
	// A victim's slot comes back as it closes; another connection may
	// close or come in meanwhile, so look again, a few times at most.
	var reason string
	for range 4 {
		l.mu.Lock()
		if reason = l.overLocked(client); reason == "" {
			l.takeLocked(client)
			l.seq++
			lc := &limitedConn{TCPConn: tc, client: client, admitted: l.seq}
			lc.release = func() { l.releaseConn(addr, lc) }
			l.conns[lc] = struct{}{}
			l.mu.Unlock()
			return lc, true
		}
		victim := l.oldestIdleLocked(client, reason)
		l.mu.Unlock()
		if victim == nil {
			break
		}
		l.evicted.WithLabelValues(reason).Inc()
		_ = victim.Close()
	}
	l.refused.WithLabelValues(reason).Inc() // the bound it was over when last looked at
	return nil, false
}

// oldestIdleLocked is the connection admitted first, of the bound reason
// names (per_client: client's; max: any), that is not in a request; nil
// if every one is. Under l.mu.
func (l *connLimiter) oldestIdleLocked(client netip.Prefix, reason string) *limitedConn {
	var oldest *limitedConn
	for c := range l.conns {
		if c.inRequest.Load() || (reason == refusedPerClient && c.client != client) {
			continue
		}
		if oldest == nil || c.admitted < oldest.admitted {
			oldest = c
		}
	}
	return oldest
}

// trackRequests is the http.Server ConnState hook of a listener whose
// limiter evicts: a connection in a request (StateActive, or hijacked) is
// not evicted.
func trackRequests(c net.Conn, st http.ConnState) {
	if tc, ok := c.(*tls.Conn); ok {
		c = tc.NetConn()
	}
	if lc, ok := c.(*limitedConn); ok {
		lc.inRequest.Store(st == http.StateActive || st == http.StateHijacked)
	}
}

// limitedConn gives its slot back when closed. It embeds the
// *net.TCPConn itself, not a net.Conn, so that what the hit path relies on
// keeps working: net.Buffers' one writev (an unexported method of
// *net.TCPConn, promoted here) and sendfile/splice.
type limitedConn struct {
	*net.TCPConn
	once    sync.Once
	release func()

	// For a limiter that evicts (connLimiter.evicted): the connection's
	// client, its order of admission, and whether it is in a request.
	client    netip.Prefix
	admitted  uint64
	inRequest atomic.Bool
}

func (c *limitedConn) Close() error {
	err := c.TCPConn.Close()
	c.once.Do(c.release)
	return err
}

// ConnectionStatus is the status page's view of the connection bounds.
type ConnectionStatus struct {
	Open             int     `json:"open"`
	Max              int     `json:"max"`
	PerClient        int     `json:"per_client"` // 0: off
	RefusedMax       float64 `json:"refused_max"`
	RefusedPerClient float64 `json:"refused_per_client"`
	// QUIC Initial packets refused before a handshake (both reasons).
	RefusedQUICInitials float64 `json:"refused_quic_initials"`
}

// PeerConnectionStatus is the status page's view of the cluster
// listener's connection bound (per address: newPeerConnLimiter).
type PeerConnectionStatus struct {
	Open       int     `json:"open"`
	PerAddress int     `json:"per_address"`
	Refused    float64 `json:"refused"`
}

// AdminConnectionStatus is the status page's view of the admin
// listener's connection bounds (newAdminConnLimiter).
type AdminConnectionStatus struct {
	Open              int     `json:"open"`
	Max               int     `json:"max"`
	PerAddress        int     `json:"per_address"`
	RefusedMax        float64 `json:"refused_max"`
	RefusedPerAddress float64 `json:"refused_per_address"`
	// Connections not in a request closed to make room (both bounds).
	Evicted float64 `json:"evicted"`
}

// ipOf is a TCP or QUIC connection's remote IP address.
func ipOf(a net.Addr) netip.Addr {
	if ta, ok := a.(*net.TCPAddr); ok {
		return ta.AddrPort().Addr()
	}
	if ua, ok := a.(*net.UDPAddr); ok {
		return ua.AddrPort().Addr()
	}
	return netip.Addr{}
}
