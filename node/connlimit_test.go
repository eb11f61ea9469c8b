package node

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

func TestConnLimiterCounts(t *testing.T) {
	l := newConnLimiter(3, 2, prometheus.NewRegistry())
	a, b := netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("::ffff:192.0.2.1")
	c := netip.MustParseAddr("2001:db8::1")
	steps := []struct {
		addr netip.Addr
		want string
	}{
		{a, ""}, {b, ""}, // one address, written two ways
		{a, refusedPerClient},
		{c, ""},
		{netip.MustParseAddr("198.51.100.7"), refusedMax},
	}
	for i, s := range steps {
		if got := l.admit(s.addr); got != s.want {
			t.Fatalf("step %d: admit(%s) = %q, want %q", i, s.addr, got, s.want)
		}
	}
	if l.Open() != 3 {
		t.Fatalf("open %d, want 3", l.Open())
	}
	l.release(b)
	if got := l.admit(a); got != "" {
		t.Fatalf("after a release: %q", got)
	}
	for _, addr := range []netip.Addr{a, a, c} {
		l.release(addr)
	}
	if l.Open() != 0 || len(l.byAddr) != 0 {
		t.Fatalf("after releasing everything: open %d, addresses %v", l.Open(), l.byAddr)
	}
	if got := l.admit(a); got != "" { // nothing left over after all that
		t.Fatalf("fresh admit: %q", got)
	}
	off := newConnLimiter(0, 0, prometheus.NewRegistry())
	for range 1000 {
		if off.admit(a) != "" {
			t.Fatal("a limiter without bounds refused")
		}
	}
}

// closedAtOnce reports whether the node closes conn before answering
// anything: a refused connection reads EOF (or a reset) at once.
func closedAtOnce(t *testing.T, conn net.Conn) bool {
	t.Helper()
	_ = conn.SetReadDeadline(time.Now().Add(2 * time.Second))
	_, err := conn.Read(make([]byte, 1))
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		return false
	}
	return err != nil
}

// TestAClientCannotHoldMoreConnectionsThanItsShare: connections that send
// nothing hold their slots (that is the attack); one over a client's share
// is closed at once, and a slot given back is usable again, on the plain
// and the TLS listeners alike.
func TestAClientCannotHoldMoreConnectionsThanItsShare(t *testing.T) {
	origin := reviewOrigin(t)
	cp, kp := writePair(t, t.TempDir(), "a", []string{"a.test"}, 1)
	n := startNode(t, origin.URL, "limits: {max_connections_per_client: 2}\n"+
		"tls: {listen: '127.0.0.1:0', cert_file: '"+cp+"', key_file: '"+kp+"'}\n")
	held := make([]net.Conn, 0, 2)
	for range 2 {
		c, err := net.Dial("tcp", n.PublicAddr())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		held = append(held, c)
	}
	// The two count once accepted: wait for the node to see them.
	deadline := time.Now().Add(5 * time.Second)
	for n.conns.Open() < 2 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	for _, addr := range []string{n.PublicAddr(), h3Addr(n)} {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		if !closedAtOnce(t, c) {
			t.Errorf("%s: a third connection from one address was kept", addr)
		}
		c.Close()
	}
	if got := metricValue(t, n, "edge_client_connections_refused_total", "reason", "per_client"); got != 2 {
		t.Errorf("refused per_client = %v, want 2", got)
	}
	_, page := getBody(t, "http://"+n.AdminAddr()+"/status")
	_, js := getBody(t, "http://"+n.AdminAddr()+"/status.json")
	if !strings.Contains(page, "at most 2 per address") || !strings.Contains(page, "2 (per address)") || !strings.Contains(js, `"refused_per_client":2`) {
		t.Errorf("the status page does not show the bound and what it refused:\n%s", js)
	}
	held[0].Close()
	deadline = time.Now().Add(5 * time.Second)
	for n.conns.Open() > 1 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if resp := reviewGet(t, n.PublicAddr(), "/a"); resp.StatusCode != http.StatusOK {
		t.Fatalf("a slot given back: %d", resp.StatusCode)
	}
	// And over TLS, through the hit path's handshake listener (reviewGet's
	// client keeps its connection: the other held one must go first).
	held[1].Close()
	deadline = time.Now().Add(5 * time.Second)
	for n.conns.Open() > 1 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true, ServerName: "a.test"}, //nolint:gosec // test certificate
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "tcp", h3Addr(n))
		}, DisableKeepAlives: true}}
	resp, err := client.Get("https://a.test/a")
	if err != nil {
		t.Fatalf("https with a slot free: %v", err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("https with a slot free: %d", resp.StatusCode)
	}
}

// TestMaxConnectionsBoundsEveryClientTogether: limits.max_connections
// counts all clients, and HTTP/3 connections with TCP ones.
func TestMaxConnectionsBoundsEveryClientTogether(t *testing.T) {
	h3o := newH3Origin(t)
	n := startH3Node(t, h3o.URL, "limits: {max_connections: 2}\n")
	for range 2 {
		c, err := net.Dial("tcp", n.PublicAddr())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
	}
	deadline := time.Now().Add(5 * time.Second)
	for n.conns.Open() < 2 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	client := h3Client(n)
	client.Timeout = 3 * time.Second
	if resp, err := client.Get("https://a.test/a"); err == nil {
		resp.Body.Close()
		t.Fatalf("an HTTP/3 connection over max_connections was served: %d", resp.StatusCode)
	}
	// Refused from its first packet, before a handshake.
	if got := metricValue(t, n, "edge_client_quic_initials_refused_total", "reason", "max"); got < 1 {
		t.Errorf("QUIC Initials refused max = %v, want at least 1", got)
	}
}

// The default bound leaves the reserve for the node's own descriptors.
func TestDefaultMaxConnectionsKeepsAReserve(t *testing.T) {
	got := defaultMaxConnections(256)
	if got < 64 {
		t.Fatalf("default %d below its floor", got)
	}
	t.Logf("default limits.max_connections here: %d (reserve %d)", got, connReserve(256))
	for _, c := range []struct{ nofile, inflight, want int }{
		{1 << 20, 256, 1<<20 - 2048},
		{20000, 256, 17952},
		{1024, 256, 512}, // a small container limit: half stays for the node
		{100, 256, 64},
	} {
		if got := maxConnectionsUnder(c.nofile, c.inflight); got != c.want {
			t.Errorf("maxConnectionsUnder(%d, %d) = %d, want %d", c.nofile, c.inflight, got, c.want)
		}
		// The cluster listener may take half of what the clients' bound
		// leaves, so the node's own work keeps the other half.
		peers := maxPeerConnectionsUnder(c.nofile, c.inflight)
		if left := c.nofile - c.want; peers != max(64, left/2) {
			t.Errorf("maxPeerConnectionsUnder(%d, %d) = %d, want half of the %d left (at least 64)", c.nofile, c.inflight, peers, left)
		}
	}
}

// TestConnLimiterCountsAnIPv6ClientByItsNetwork: a client holding a /64
// cannot spread its connections over its addresses to get a share per
// address; the next /64 is another client.
func TestConnLimiterCountsAnIPv6ClientByItsNetwork(t *testing.T) {
	l := newConnLimiter(0, 2, prometheus.NewRegistry())
	mine := []netip.Addr{netip.MustParseAddr("2001:db8:1:2::1"), netip.MustParseAddr("2001:db8:1:2:aaaa::7")}
	for _, a := range mine {
		if got := l.admit(a); got != "" {
			t.Fatalf("admit(%s) = %q", a, got)
		}
	}
	if got := l.admit(netip.MustParseAddr("2001:db8:1:2:ffff:ffff:ffff:ffff")); got != refusedPerClient {
		t.Fatalf("a third address of the same /64: %q, want %q", got, refusedPerClient)
	}
	if got := l.admit(netip.MustParseAddr("2001:db8:1:3::1")); got != "" {
		t.Fatalf("the next /64 shares the bound: %q", got)
	}
	for _, a := range append(mine, netip.MustParseAddr("2001:db8:1:3::1")) {
		l.release(a)
	}
	if l.Open() != 0 || len(l.byAddr) != 0 {
		t.Fatalf("after releasing everything: open %d, clients %v", l.Open(), l.byAddr)
	}
}

// TestTheAdminListenerBoundsConnections: connections to the admin
// listener over its bound for one address, or in all, are closed as soon
// as accepted and counted by reason (status page and metrics), and a slot
// comes back when a connection closes, so the operator gets in again; the
// status page itself is served through the bound.
func TestTheAdminListenerBoundsConnections(t *testing.T) {
	origin := s16Origin(t)
	n := startNodeYAML(t, "node_id: a\nlisten: '"+freeAddr(t)+"'\nadmin: {listen: '"+freeAddr(t)+"'}\norigin: {url: '"+origin.URL+"'}\n")
	if n.admConns.perClient != adminConnectionsPerAddress || n.admConns.max != adminConnectionsMax {
		t.Fatalf("admin bounds %d per address, %d in all; want %d and %d", n.admConns.perClient, n.admConns.max, adminConnectionsPerAddress, adminConnectionsMax)
	}
	for _, c := range []struct {
		perAddr, max int
		reason       string
	}{{2, 0, refusedPerClient}, {0, 2, refusedMax}} {
		n.admConns.mu.Lock()
		n.admConns.perClient, n.admConns.max = c.perAddr, c.max
		n.admConns.mu.Unlock()
		s16WaitOpen(n.admConns, 0, 3*time.Second)
		var held []net.Conn
		for range 2 {
			conn, err := net.Dial("tcp", n.AdminAddr())
			if err != nil {
				t.Fatal(err)
			}
			held = append(held, conn)
		}
		if got := s16WaitOpen(n.admConns, 2, 2*time.Second); got != 2 {
			t.Fatalf("%s: %d admin connections counted, want 2", c.reason, got)
		}
		before := counterOf(n.admConns.refused.WithLabelValues(c.reason))
		over, err := net.Dial("tcp", n.AdminAddr())
		if err != nil {
			t.Fatal(err)
		}
		if !closedAtOnce(t, over) {
			t.Errorf("%s: a third admin connection over a bound of 2 was kept", c.reason)
		}
		over.Close()
		if got := counterOf(n.admConns.refused.WithLabelValues(c.reason)); got != before+1 {
			t.Errorf("%s: refusals counted %v, want %v", c.reason, got, before+1)
		}
		held[0].Close()
		s16WaitOpen(n.admConns, 1, 2*time.Second)
		resp, err := http.Get("http://" + n.AdminAddr() + "/status.json")
		if err != nil {
			t.Fatalf("%s: the status page after a slot came back: %v", c.reason, err)
		}
		var st Status
		err = json.NewDecoder(resp.Body).Decode(&st)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		want := st.AdminConnections.RefusedPerClient
		if c.reason == refusedMax {
			want = st.AdminConnections.RefusedMax
		}
		if want != before+1 || st.AdminConnections.Open < 2 {
			t.Errorf("%s: status page %+v, want the refusal counted and this page's connection open", c.reason, st.AdminConnections)
		}
		http.DefaultClient.CloseIdleConnections()
		held[1].Close()
	}
}
