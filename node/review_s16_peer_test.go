package node

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

func s16WaitOpen(l *connLimiter, want int, d time.Duration) int {
	deadline := time.Now().Add(d)
	for l.Open() != want && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	return l.Open()
}

func s16Origin(t *testing.T) *httptest.Server {
	o := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=600")
		_, _ = io.WriteString(w, "page "+r.URL.Path)
	}))
	t.Cleanup(o.Close)
	return o
}

func s16Get(t *testing.T, addr, path string) (string, string) {
	t.Helper()
	c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := c.Get("http://" + addr + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b), resp.Header.Get("Cache-Status")
}

// HOLDS: a two-node cluster serves pages from its peer through the
// bounded cluster listener; the status page and metrics show the bound;
// and a node stopped gives back every slot of its own cluster listener.
func TestS16PeerClusterThroughLimiterAndStop(t *testing.T) {
	origin := s16Origin(t)
	clA, clB := freeAddr(t), freeAddr(t)
	start := func(id, cl string) (*Node, func()) {
		return runNodeYAML(t, "node_id: "+id+"\nlisten: '"+freeAddr(t)+"'\nadmin: {listen: '"+freeAddr(t)+"'}\n"+
			"origin: {url: '"+origin.URL+"'}\n"+
			"cluster: {listen: '"+cl+"', peers: 'a="+clA+",b="+clB+"', secret: 'a-test-cluster-secret', heartbeat_period: 50ms}\n")
	}
	a, stopA := start("a", clA)
	b, stopB := start("b", clB)
	// Each must trust the other first: asked at once, a node with its
	// peer not yet heard fetched every page itself (0 answers from a peer
	// in four runs of five with -count=5).
	deadline := time.Now().Add(10 * time.Second)
	for ok := false; !ok; time.Sleep(20 * time.Millisecond) {
		ok = true
		for _, n := range []*Node{a, b} {
			ps := n.cluster.Peers()
			ok = ok && len(ps) == 1 && ps[0].Trusted
		}
		if !ok && time.Now().After(deadline) {
			t.Fatal("peers not trusted in 10 s")
		}
	}
	forwarded := 0
	for i := 0; forwarded < 3 && i < 40; i++ {
		path := fmt.Sprintf("/s16/%d", i)
		for _, n := range []*Node{a, b} {
			got, status := s16Get(t, n.PublicAddr(), path)
			if got != "page "+path {
				t.Fatalf("%s: %q (%s)", path, got, status)
			}
			if strings.Count(status, "fwd=") == 1 && strings.Contains(status, ", ") {
				forwarded++
			}
		}
	}
	if forwarded < 3 {
		t.Fatalf("only %d answers from a peer", forwarded)
	}
	if a.peerConns.Open()+b.peerConns.Open() == 0 {
		t.Error("peer answers came but no cluster listener connection is counted")
	}
	// The page and the limiter are read at two moments, and a peer's
	// connection may close between them (a review: 3 of 80 loaded runs):
	// the page must agree with the limiter at least once in a few reads.
	var st struct {
		Peer *PeerConnectionStatus `json:"peer_connections"`
	}
	openNow := -1
	for try := 0; try < 20 && (st.Peer == nil || st.Peer.Open != openNow); try++ {
		time.Sleep(time.Duration(try) * 20 * time.Millisecond)
		resp, err := http.Get("http://" + a.AdminAddr() + "/status.json")
		if err != nil {
			t.Fatal(err)
		}
		st.Peer = nil
		_ = json.NewDecoder(resp.Body).Decode(&st)
		resp.Body.Close()
		openNow = a.peerConns.Open()
	}
	if st.Peer == nil || st.Peer.PerAddress < 64 || st.Peer.Open != openNow {
		t.Errorf("status.json peer_connections %+v (open now %d)", st.Peer, openNow)
	}
	if v := metricValue(t, a, "edge_peer_connections_refused_total", "reason", "per_client"); v != 0 {
		t.Errorf("refused %v", v)
	}
	t.Logf("open before stop: a %d, b %d", a.peerConns.Open(), b.peerConns.Open())
	stopB()
	if got := b.peerConns.Open(); got != 0 {
		t.Errorf("a stopped node still counts %d cluster listener connections", got)
	}
	stopA()
	if got := a.peerConns.Open(); got != 0 {
		t.Errorf("a stopped node still counts %d cluster listener connections", got)
	}
}

func s16OneNode(t *testing.T, extra string) *Node {
	origin := s16Origin(t)
	cl, other := freeAddr(t), freeAddr(t)
	n, _ := runNodeYAML(t, "node_id: a\nlisten: '"+freeAddr(t)+"'\nadmin: {listen: '"+freeAddr(t)+"'}\n"+
		"origin: {url: '"+origin.URL+"'}\n"+
		"cluster: {listen: '"+cl+"', peers: 'a="+cl+",b="+other+"', secret: 'a-test-cluster-secret', heartbeat_period: 50ms"+extra+"}\n")
	return n
}

func s16PeerAddr(n *Node) string { return n.cfg.Cluster.Listen }

// HOLDS: slots come back when the mux hands a connection to membership
// (a broken stream), when the hit path hands one to net/http (an unsigned
// request, refused), when a connection sends nothing and its client
// closes it, and when the client closes mid-request.
func TestS16PeerSlotsReleasedOnEveryPath(t *testing.T) {
	n := s16OneNode(t, "")
	base := s16WaitOpen(n.peerConns, 0, 3*time.Second)
	dial := func() net.Conn {
		c, err := net.Dial("tcp", s16PeerAddr(n))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	// membership: the tag and junk
	c := dial()
	_, _ = c.Write([]byte{0xEE, 1, 2, 3, 4, 5, 6, 7})
	// hit path → net/http: an unsigned request, kept alive
	h := dial()
	_, _ = io.WriteString(h, "GET /x HTTP/1.1\r\nHost: a\r\n\r\n")
	_ = h.SetReadDeadline(time.Now().Add(3 * time.Second))
	buf := make([]byte, 512)
	k, _ := h.Read(buf)
	t.Logf("unsigned request: %q", strings.SplitN(string(buf[:k]), "\r\n", 2)[0])
	// nothing sent
	e := dial()
	// half a request
	p := dial()
	_, _ = io.WriteString(p, "GET /y HTTP/1.1\r\nHo")
	if got := s16WaitOpen(n.peerConns, base+4, 2*time.Second); got < base+3 {
		t.Logf("open %d with four held", got)
	}
	for _, x := range []net.Conn{c, h, e, p} {
		x.Close()
	}
	if got := s16WaitOpen(n.peerConns, base, 4*time.Second); got != base {
		t.Errorf("open %d after every connection closed, want %d", got, base)
	}
}

// HOLDS: under cluster.tls, a failed handshake gives its slot back.
func TestS16PeerTLSHandshakeFailureReleases(t *testing.T) {
	cp, kp := writePair(t, t.TempDir(), "a", []string{"a.test"}, 1)
	n := s16OneNode(t, ", tls: {cert_file: '"+cp+"', key_file: '"+kp+"', ca_file: '"+cp+"'}")
	base := s16WaitOpen(n.peerConns, 0, 3*time.Second)
	var held []net.Conn
	for range 5 {
		c, err := net.Dial("tcp", s16PeerAddr(n))
		if err != nil {
			t.Fatal(err)
		}
		// a TLS record header, then garbage
		_, _ = c.Write([]byte{0x16, 0x03, 0x01, 0x00, 0x05, 'h', 'e', 'l', 'l', 'o'})
		held = append(held, c)
	}
	for _, c := range held {
		_ = c.SetReadDeadline(time.Now().Add(3 * time.Second))
		_, _ = io.ReadAll(c) // the node closes it
	}
	if got := s16WaitOpen(n.peerConns, base, 3*time.Second); got != base {
		t.Errorf("open %d after five failed handshakes (closed by the node), want %d", got, base)
	}
	for _, c := range held {
		c.Close()
	}
}

// HOLDS: over the bound (lowered here to 2) a connection is closed at
// once and counted; the status page says so; a slot given back is used.
func TestS16PeerBoundRefusesAndCounts(t *testing.T) {
	n := s16OneNode(t, "")
	if n.peerConns.perClient < 64 {
		t.Fatalf("the cluster listener's default bound per address is %d, below its floor of 64", n.peerConns.perClient)
	}
	n.peerConns.mu.Lock()
	n.peerConns.perClient = 2
	n.peerConns.mu.Unlock()
	s16WaitOpen(n.peerConns, 0, 3*time.Second)
	var held []net.Conn
	for range 2 {
		c, err := net.Dial("tcp", s16PeerAddr(n))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		held = append(held, c)
	}
	s16WaitOpen(n.peerConns, 2, 2*time.Second)
	c, err := net.Dial("tcp", s16PeerAddr(n))
	if err != nil {
		t.Fatal(err)
	}
	if !closedAtOnce(t, c) {
		t.Error("a third connection over the bound of 2 was kept")
	}
	c.Close()
	if s := n.Snapshot().PeerConnections; s == nil || s.Refused != 1 || s.Open != 2 {
		t.Errorf("status %+v", s)
	}
	held[0].Close()
	s16WaitOpen(n.peerConns, 1, 2*time.Second)
	c, err = net.Dial("tcp", s16PeerAddr(n))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if closedAtOnce(t, c) {
		t.Error("a connection after a slot came back was closed")
	}
}

// s16Syscw is the process's write system calls so far.
func s16Syscw(t *testing.T) int {
	b, err := os.ReadFile("/proc/self/io")
	if err != nil {
		t.Skip(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "syscw: "); ok {
			n, _ := strconv.Atoi(v)
			return n
		}
	}
	t.Skip("no syscw")
	return 0
}

// HOLDS: net.Buffers on the cluster listener's wrapped connection (behind
// a read-only wrapper as the mux's prefixConn, looked through by
// batchConn.vectored) is still one writev: the wrapper keeps
// *net.TCPConn's unexported writeBuffers.
func TestS16PeerLimitedConnKeepsWritev(t *testing.T) {
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	ln := newPeerConnLimiter(64, prometheus.NewRegistry()).listener(raw)
	cc, err := net.Dial("tcp", raw.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	sc, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer sc.Close()
	go func() { _, _ = io.Copy(io.Discard, cc) }()
	bc := &batchConn{Conn: readOnlyWrapper{sc}, stats: &batchStats{}, hold: time.Second, full: plainFull}
	const rounds = 200
	start := s16Syscw(t)
	for range rounds {
		if _, err := (&net.Buffers{make([]byte, 100), make([]byte, 100), make([]byte, 100)}).WriteTo(bc.vectored()); err != nil {
			t.Fatal(err)
		}
	}
	got := s16Syscw(t) - start
	// control: a wrapper that hides the connection costs a write per buffer
	ctl := s16Syscw(t)
	for range rounds {
		_, _ = (&net.Buffers{make([]byte, 100), make([]byte, 100), make([]byte, 100)}).WriteTo(struct{ net.Conn }{sc})
	}
	t.Logf("control (hidden conn): %d write system calls", s16Syscw(t)-ctl)
	t.Logf("%d write system calls for %d three-buffer writes", got, rounds)
	if got > rounds*3/2 {
		t.Errorf("%d write system calls for %d three-buffer writes: not one writev each", got, rounds)
	}
}
