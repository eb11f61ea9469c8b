package node

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/edgecache/edge/config"
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

// TestTheAdminListenerBoundsConnections: over a bound of the admin
// listener (one address, or in all) a new connection gets in and the oldest
// of that bound not in a request (here: connected, nothing sent) is closed
// and counted; while every one is in a request (a head whose body never
// comes), a new one is closed at once and counted as refused. The status
// page is served through the bound and shows both counts.
func TestTheAdminListenerBoundsConnections(t *testing.T) {
	origin := s16Origin(t)
	n := startNodeYAML(t, "node_id: a\nlisten: '"+freeAddr(t)+"'\nadmin: {listen: '"+freeAddr(t)+"', token: tok}\norigin: {url: '"+origin.URL+"'}\n")
	if n.admConns.perClient != adminConnectionsPerAddress || n.admConns.max != adminConnectionsMax {
		t.Fatalf("admin bounds %d per address, %d in all; want %d and %d", n.admConns.perClient, n.admConns.max, adminConnectionsPerAddress, adminConnectionsMax)
	}
	if n.admin.ReadTimeout != adminRequestTimeout || n.admin.WriteTimeout != adminRequestTimeout {
		t.Errorf("admin request timeouts %v, %v; want %v", n.admin.ReadTimeout, n.admin.WriteTimeout, adminRequestTimeout)
	}
	dial := func() net.Conn {
		t.Helper()
		c, err := net.Dial("tcp", n.AdminAddr())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	for _, c := range []struct {
		perAddr, max int
		reason       string
	}{{2, 0, refusedPerClient}, {0, 2, refusedMax}} {
		n.admConns.mu.Lock()
		n.admConns.perClient, n.admConns.max = c.perAddr, c.max
		n.admConns.mu.Unlock()
		s16WaitOpen(n.admConns, 0, 3*time.Second)
		older, newer := dial(), dial()
		if got := s16WaitOpen(n.admConns, 2, 2*time.Second); got != 2 {
			t.Fatalf("%s: %d admin connections counted, want 2", c.reason, got)
		}
		evicted := counterOf(n.admConns.evicted.WithLabelValues(c.reason))
		third := dial()
		if !closedAtOnce(t, older) {
			t.Errorf("%s: over a bound of 2, the oldest idle connection was not closed for a new one", c.reason)
		}
		if !stillOpen(newer) || !stillOpen(third) {
			t.Errorf("%s: a connection other than the oldest was closed", c.reason)
		}
		if got := counterOf(n.admConns.evicted.WithLabelValues(c.reason)); got != evicted+1 {
			t.Errorf("%s: evictions counted %v, want %v", c.reason, got, evicted+1)
		}
		// Both now in a request: symbol lookups whose bodies stop coming.
		for _, conn := range []net.Conn{newer, third} {
			if _, err := io.WriteString(conn, "POST /debug/pprof/symbol HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer tok\r\nContent-Length: 50\r\n\r\n0x1+"); err != nil {
				t.Fatal(err)
			}
		}
		for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
			n.admConns.mu.Lock()
			busy := 0
			for lc := range n.admConns.conns {
				if lc.inRequest.Load() {
					busy++
				}
			}
			n.admConns.mu.Unlock()
			if busy == 2 {
				break
			}
		}
		refused := counterOf(n.admConns.refused.WithLabelValues(c.reason))
		if !closedAtOnce(t, dial()) {
			t.Errorf("%s: a connection over a bound whose connections are all in a request was kept", c.reason)
		}
		if got := counterOf(n.admConns.refused.WithLabelValues(c.reason)); got != refused+1 {
			t.Errorf("%s: refusals counted %v, want %v", c.reason, got, refused+1)
		}
		if !stillOpen(newer) || !stillOpen(third) {
			t.Errorf("%s: a connection in a request was closed to make room", c.reason)
		}
		newer.Close()
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
		if st.AdminConnections.RefusedMax+st.AdminConnections.RefusedPerAddress != refused+1+refusedOther(st, c.reason) || st.AdminConnections.Evicted < 1 || st.AdminConnections.Open < 2 {
			t.Errorf("%s: status page %+v, want the refusal and the eviction counted and this page's connection open", c.reason, st.AdminConnections)
		}
		http.DefaultClient.CloseIdleConnections()
		third.Close()
	}
}

// stillOpen reports whether conn is open a moment later (an answer read
// counts as open): for connections a check just before should have spared.
func stillOpen(conn net.Conn) bool {
	_ = conn.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	n, err := conn.Read(make([]byte, 1))
	_ = conn.SetReadDeadline(time.Time{})
	var ne net.Error
	return n > 0 || (errors.As(err, &ne) && ne.Timeout())
}

// refusedOther is the status page's admin refusals of the reason that is
// not reason.
func refusedOther(st Status, reason string) float64 {
	if reason == refusedMax {
		return st.AdminConnections.RefusedPerAddress
	}
	return st.AdminConnections.RefusedMax
}

// TestAdminRequestsThatStallEndAndAStopClosesWhatIsLeft: a request whose
// body stops coming ends (and its connection and admin slot with it) at
// the request timeout, where before nothing ended it (a review: 256 of
// them shut the operator out for good); a body the handler never reads
// ends the connection as soon as the answer is out; and a stop ends admin
// requests still under way at its deadline, slots and goroutines with
// them. The request timeout is shortened here from its two minutes.
func TestAdminRequestsThatStallEndAndAStopClosesWhatIsLeft(t *testing.T) {
	// A symbol lookup whose body stops after 4 of 50 bytes: pprof reads it.
	stallBody := "POST /debug/pprof/symbol HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer tok\r\nContent-Length: 50\r\n\r\n0x1+"
	n, stop := s18AdminNode(t, time.Second)
	for _, raw := range []string{stallBody, "GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\n\r\n"} {
		c, err := net.Dial("tcp", n.AdminAddr())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := io.WriteString(c, raw); err != nil {
			t.Fatal(err)
		}
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		began := time.Now()
		if _, err := io.Copy(io.Discard, c); err != nil {
			t.Errorf("%.20q: %v before the connection ended (want it ended by the request timeout)", raw, err)
		}
		t.Logf("%.20q: ended after %v", raw, time.Since(began).Round(time.Millisecond))
		if got := s16WaitOpen(n.admConns, 0, 3*time.Second); got != 0 {
			t.Errorf("%.20q: %d admin slots held after the request ended", raw, got)
		}
	}
	stop()

	// A stop (shutdown_timeout 1s) with a request under way longer.
	n, stop = s18AdminNode(t, time.Minute)
	busy, err := net.Dial("tcp", n.AdminAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	if _, err := io.WriteString(busy, stallBody); err != nil {
		t.Fatal(err)
	}
	s16WaitOpen(n.admConns, 1, 3*time.Second)
	began := time.Now()
	stop()
	if got := n.admConns.Open(); got != 0 {
		t.Errorf("after the stop (%v), %d admin slots still held", time.Since(began).Round(time.Millisecond), got)
	}
}

// TestABodyThatNeverComesDoesNotHoldAClusterConnection: requests refused
// on the cluster listener (unsigned) that declare a body and send none are
// answered and their connections closed at once; before, net/http waited
// for the body with no deadline and the connection (and its slot of the
// address's share) was held for good.
func TestABodyThatNeverComesDoesNotHoldAClusterConnection(t *testing.T) {
	n := s16OneNode(t, "")
	base := s16WaitOpen(n.peerConns, 0, 3*time.Second)
	for _, head := range []string{
		"GET /x HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\n\r\n",
		"POST /_edge/purge HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\n\r\n",
		"POST /_edge/owed HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n",
	} {
		c, err := net.Dial("tcp", s16PeerAddr(n))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := io.WriteString(c, head); err != nil {
			t.Fatal(err)
		}
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		b, err := io.ReadAll(c)
		if err != nil || !strings.HasPrefix(string(b), "HTTP/1.1 403") {
			t.Errorf("%.24q: read %.40q, %v; want a 403 and the connection closed", head, b, err)
		}
	}
	if got := s16WaitOpen(n.peerConns, base, 3*time.Second); got != base {
		t.Errorf("cluster listener connections open %d, want %d", got, base)
	}
}

// s18AdminNode runs a node whose admin request timeout is timeout
// (shutdown_timeout 1s); stop ends its Run and waits for it.
func s18AdminNode(t *testing.T, timeout time.Duration) (*Node, func()) {
	t.Helper()
	origin := s16Origin(t)
	cfg, err := config.LoadBytes([]byte("node_id: a\nlisten: '" + freeAddr(t) + "'\nshutdown_timeout: 1s\nadmin: {listen: '" + freeAddr(t) + "', token: tok}\norigin: {url: '" + origin.URL + "'}\n"))
	if err != nil {
		t.Fatal(err)
	}
	n, err := New(cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	n.admin.ReadTimeout, n.admin.WriteTimeout = timeout, timeout // before it serves
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- n.Run(ctx) }()
	var once sync.Once
	stop := func() { once.Do(func() { cancel(); <-done }) }
	t.Cleanup(stop)
	return n, stop
}
