package cluster

// Session 21's hostile review of membership: a harness of in-process nodes
// on real sockets, 127.0.0.1 only (UDP and TCP on one port, as node does:
// heartbeats, memberlist packets, memberlist streams through MuxListener).

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/edgecache/edge/indicators"
	"github.com/edgecache/edge/proxy"
	"github.com/edgecache/edge/routing"
)

const s21Secret = "s21-review-cluster-secret"

// s21LogLevel is the nodes' log level (debug shows memberlist's own lines).
var s21LogLevel = slog.LevelInfo

// s21Node is one member on real loopback sockets.
type s21Node struct {
	id     string
	addr   string
	c      *Cluster
	udp    *net.UDPConn
	tcp    net.Listener
	srv    *http.Server
	reg    *prometheus.Registry
	log    *syncBuffer
	cancel context.CancelFunc
	done   chan struct{}
}

// s21Listen binds UDP and TCP on one free port of 127.0.0.1.
func s21Listen(t *testing.T) (*net.UDPConn, net.Listener) {
	t.Helper()
	for range 50 {
		u, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
		if err != nil {
			t.Fatal(err)
		}
		l, err := net.Listen("tcp", u.LocalAddr().String())
		if err == nil {
			return u, l
		}
		_ = u.Close()
	}
	t.Fatal("no port free for both UDP and TCP on 127.0.0.1")
	return nil, nil
}

// s21Start starts a node named id on a new port with the given configured
// peers; opts change its configuration.
func s21Start(t *testing.T, id string, peers map[string]string, opts ...func(*Config)) *s21Node {
	t.Helper()
	u, l := s21Listen(t)
	return s21StartOn(t, id, u, l, peers, opts...)
}

func s21StartOn(t *testing.T, id string, u *net.UDPConn, l net.Listener, peers map[string]string, opts ...func(*Config)) *s21Node {
	t.Helper()
	self := u.LocalAddr().String()
	cfg := Config{
		NodeID: id, Listen: self, Peers: peers, Secret: []byte(s21Secret), Period: 50 * time.Millisecond,
		Detector: "ml", Selection: SelectionFNA, Mode: routing.ModeHybrid, Arity: 4, Q: 2, HotThreshold: 3,
		PeerTimeout: 300 * time.Millisecond, Indicator: indicators.DefaultFilterConfig(1000),
		Monitoring: MonitorAll, ProbeInterval: 200 * time.Millisecond, SuspicionMult: DefaultSuspicionMult,
	}
	for _, o := range opts {
		o(&cfg)
	}
	reg := prometheus.NewRegistry()
	logs := &syncBuffer{}
	c, err := New(cfg, nopFetcher{}, proxy.NewStore(1<<20, 4), NewMetrics(reg), slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: s21LogLevel})))
	if err != nil {
		t.Fatal(err)
	}
	ln := c.MuxListener(l)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "peer "+id)
	}), ReadHeaderTimeout: 2 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	ctx, cancel := context.WithCancel(context.Background())
	n := &s21Node{id: id, addr: self, c: c, udp: u, tcp: l, srv: srv, reg: reg, log: logs, cancel: cancel, done: make(chan struct{})}
	go func() { defer close(n.done); _ = c.Run(ctx, u) }()
	t.Cleanup(n.stop)
	return n
}

// stop shuts the node down as SIGTERM does (memberlist says goodbye) and
// frees its port.
func (n *s21Node) stop() {
	select {
	case <-n.done:
		return
	default:
	}
	n.cancel()
	select {
	case <-n.done:
	case <-time.After(10 * time.Second):
	}
	_ = n.srv.Close()
	_ = n.tcp.Close()
	_ = n.udp.Close()
}

func (n *s21Node) member(id string) bool { return peerMember(n.c, id) }

func (n *s21Node) trusts(id string) bool { return peerTrusted(n.c, id) }

func (n *s21Node) peerAddr(id string) string {
	n.c.mu.Lock()
	defer n.c.mu.Unlock()
	if p := n.c.peers[id]; p != nil {
		return p.Addr
	}
	return ""
}

func (n *s21Node) mlMembers() string {
	var out []string
	for name, m := range n.c.mlView.snapshot() {
		out = append(out, name+"="+m.addr)
	}
	return strings.Join(out, ",")
}

// s21Eventually polls cond every 50 ms until within passes.
func s21Eventually(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s", within, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// s21Cluster starts ids, each configured with all the others.
func s21Cluster(t *testing.T, ids []string, opts ...func(*Config)) map[string]*s21Node {
	t.Helper()
	conns := map[string]*net.UDPConn{}
	lns := map[string]net.Listener{}
	addrs := map[string]string{}
	for _, id := range ids {
		conns[id], lns[id] = s21Listen(t)
		addrs[id] = conns[id].LocalAddr().String()
	}
	nodes := map[string]*s21Node{}
	for _, id := range ids {
		nodes[id] = s21StartOn(t, id, conns[id], lns[id], addrs, opts...)
	}
	s21Eventually(t, 30*time.Second, "every node has every other as a memberlist member and trusts it", func() bool {
		for _, a := range ids {
			view := nodes[a].c.mlView.snapshot()
			for _, b := range ids {
				if _, ok := view[b]; !ok || a != b && !nodes[a].trusts(b) {
					return false
				}
			}
		}
		return true
	})
	return nodes
}

func s21Describe(nodes ...*s21Node) string {
	var b strings.Builder
	for _, n := range nodes {
		fmt.Fprintf(&b, "%s: memberlist {%s}\n", n.id, n.mlMembers())
	}
	return b.String()
}

// s21Rebind binds addr again for a node restarted where it ran before,
// skipping the test if the port was taken meanwhile.
func s21Rebind(t *testing.T, addr string) (*net.UDPConn, net.Listener) {
	t.Helper()
	ua, err := net.ResolveUDPAddr("udp", addr)
	if err != nil {
		t.Fatal(err)
	}
	u, err := net.ListenUDP("udp", ua)
	if err != nil {
		t.Skipf("cannot bind %s again: %v", addr, err)
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		_ = u.Close()
		t.Skipf("cannot bind %s again: %v", addr, err)
	}
	return u, l
}
