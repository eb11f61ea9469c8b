package node

// A hostile review of the HTTP/3 serving path (node/tls.go's http3.Server)
// and what it shares with HTTP/1.1 and HTTP/2: real sockets, quic-go's
// own client, 127.0.0.1 only.

import (
	"bytes"
	"context"
	"crypto/tls"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quic-go/qpack"
	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
	"github.com/quic-go/quic-go/quicvarint"
)

// h3Origin records what the origin saw.
type h3Origin struct {
	*httptest.Server
	mu    sync.Mutex
	seen  []*http.Request
	body  map[string][]byte
	calls atomic.Int64
}

func newH3Origin(t *testing.T) *h3Origin {
	o := &h3Origin{body: map[string][]byte{}}
	o.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		o.calls.Add(1)
		b, _ := io.ReadAll(r.Body)
		o.mu.Lock()
		o.seen = append(o.seen, r)
		o.body[r.URL.Path] = b
		o.mu.Unlock()
		switch {
		case strings.HasPrefix(r.URL.Path, "/big"):
			w.Header().Set("Cache-Control", "no-store")
			w.Header().Set("Content-Type", "application/octet-stream")
			chunk := bytes.Repeat([]byte("x"), 64<<10)
			for range 256 { // 16 MiB
				if _, err := w.Write(chunk); err != nil {
					return
				}
			}
		case strings.HasPrefix(r.URL.Path, "/cookie"):
			w.Header().Set("Cache-Control", "max-age=600")
			w.Header().Set("Vary", "Cookie")
			_, _ = io.WriteString(w, "cookie="+r.Header.Get("Cookie")+" n="+itoa(len(r.Header["Cookie"])))
		default:
			w.Header().Set("Cache-Control", "max-age=600")
			_, _ = io.WriteString(w, "page "+r.URL.Path+" host="+r.Header.Get("X-Forwarded-Host")+" len="+itoa(int(r.ContentLength))+" body="+itoa(len(b)))
		}
	}))
	t.Cleanup(o.Close)
	return o
}

func itoa(n int) string {
	if n < 0 {
		return "-" + itoa(-n)
	}
	if n < 10 {
		return string(rune('0' + n))
	}
	return itoa(n/10) + string(rune('0'+n%10))
}

// startH3Node runs a node with HTTP/3 on and the given limits.
func startH3Node(t *testing.T, origin string, limits string) *Node {
	t.Helper()
	cp, kp := writePair(t, t.TempDir(), "a", []string{"a.test", "b.test"}, 1)
	return startNode(t, origin, "tls: {listen: '127.0.0.1:0', cert_file: '"+cp+"', key_file: '"+kp+"', http3: true}\n"+limits)
}

func h3Addr(n *Node) string { return n.tls.ln.Addr().String() }

func h3TLS() *tls.Config {
	return &tls.Config{InsecureSkipVerify: true, ServerName: "a.test", NextProtos: []string{http3.NextProtoH3}} //nolint:gosec // test certificate
}

// h3Client is quic-go's own HTTP/3 client, dialling the node whatever
// the URL's host.
func h3Client(n *Node) *http.Client {
	addr := h3Addr(n)
	return &http.Client{Timeout: 10 * time.Second, Transport: &http3.Transport{
		TLSClientConfig: h3TLS(), DisableCompression: true,
		Dial: func(ctx context.Context, _ string, tc *tls.Config, qc *quic.Config) (*quic.Conn, error) {
			return quic.DialAddr(ctx, addr, tc, qc)
		}}}
}

// rawH3 is a QUIC connection on which the test writes HTTP/3 frames by hand.
type rawH3 struct {
	conn *quic.Conn
}

func dialRawH3(t *testing.T, n *Node, qc *quic.Config) *rawH3 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := quic.DialAddr(ctx, h3Addr(n), h3TLS(), qc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.CloseWithError(0, "") })
	// The client's control stream with an empty SETTINGS frame.
	cs, err := c.OpenUniStream()
	if err != nil {
		t.Fatal(err)
	}
	b := quicvarint.Append(nil, 0x00) // control stream
	b = quicvarint.Append(b, 0x04)    // SETTINGS
	b = quicvarint.Append(b, 0)
	_, _ = cs.Write(b)
	return &rawH3{conn: c}
}

// headersFrame encodes fields as one HTTP/3 HEADERS frame.
func headersFrame(fields [][2]string) []byte {
	var blk bytes.Buffer
	enc := qpack.NewEncoder(&blk)
	for _, f := range fields {
		_ = enc.WriteField(qpack.HeaderField{Name: f[0], Value: f[1]})
	}
	b := quicvarint.Append(nil, 0x01)
	b = quicvarint.Append(b, uint64(blk.Len()))
	return append(b, blk.Bytes()...)
}

func dataFrame(p []byte) []byte {
	b := quicvarint.Append(nil, 0x00)
	b = quicvarint.Append(b, uint64(len(p)))
	return append(b, p...)
}

// readH3Response reads the response HEADERS from a raw stream and returns
// its :status and the decoded fields, then the concatenated DATA payload.
func readH3Response(t *testing.T, s *quic.Stream) (status string, hdr http.Header, body []byte, err error) {
	t.Helper()
	r := quicvarint.NewReader(s)
	hdr = http.Header{}
	for {
		typ, err := quicvarint.Read(r)
		if err != nil {
			return status, hdr, body, err
		}
		l, err := quicvarint.Read(r)
		if err != nil {
			return status, hdr, body, err
		}
		p := make([]byte, l)
		if _, err := io.ReadFull(s, p); err != nil {
			return status, hdr, body, err
		}
		switch typ {
		case 0x01:
			dec := qpack.NewDecoder()
			next := dec.Decode(p)
			for {
				f, err := next()
				if err != nil {
					break
				}
				if f.Name == ":status" {
					if status == "" || strings.HasPrefix(status, "1") {
						status = f.Value
					}
				} else {
					hdr.Add(f.Name, f.Value)
				}
			}
		case 0x00:
			body = append(body, p...)
		}
	}
}

func reqFields(method, authority, path string, extra ...[2]string) [][2]string {
	f := [][2]string{{":method", method}, {":scheme", "https"}, {":authority", authority}, {":path", path}}
	return append(f, extra...)
}

// TestReviewH3PartialHeadersAreTimedOut: limits.read_header_timeout
// "stops slowloris" on HTTP/1.1 (and net/http's HTTP/2 never starts a
// handler before a header block is whole). Over HTTP/3 a client that opens
// request streams and sends a few bytes of a HEADERS frame, keeping its
// connection alive with QUIC PINGs, holds every such stream (a goroutine
// and its buffers in quic-go, up to 250 per connection, connections
// unbounded) for as long as it likes: nothing times the header out.
func TestReviewH3PartialHeadersAreTimedOut(t *testing.T) {
	t.Parallel() // each its own node on its own ports
	o := newH3Origin(t)
	n := startH3Node(t, o.URL, "limits: {read_header_timeout: 300ms, idle_timeout: 1s}\n")
	c := dialRawH3(t, n, &quic.Config{KeepAlivePeriod: 100 * time.Millisecond})
	frame := headersFrame(reqFields("GET", "a.test", "/slowloris"))
	const streams = 50
	var ss []*quic.Stream
	for range streams {
		s, err := c.conn.OpenStream()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Write(frame[:3]); err != nil { // type, length, one byte of the block
			t.Fatal(err)
		}
		ss = append(ss, s)
	}
	// 10x read_header_timeout, 2.5x idle_timeout.
	time.Sleep(2500 * time.Millisecond)
	if err := c.conn.Context().Err(); err != nil {
		return // the connection was closed: held
	}
	served := 0
	for _, s := range ss {
		_, _ = s.Write(frame[3:])
		_ = s.Close()
	}
	for _, s := range ss {
		_ = s.SetReadDeadline(time.Now().Add(3 * time.Second))
		if status, _, _, _ := readH3Response(t, s); status == "200" {
			served++
		}
	}
	if served > 0 {
		t.Errorf("%d of %d HTTP/3 request streams whose HEADERS stalled for 2.5s (read_header_timeout 300ms, idle_timeout 1s) were still open and served: no header timeout over HTTP/3", served, streams)
	}
}

// TestReviewH3SlowReaderIsCutByWriteTimeout: limits.write_timeout says a
// client must accept each 32 KiB within it. An HTTP/3 client that stops
// reading a large pass-through response (its flow-control window closed,
// the connection kept alive by PINGs) must be cut off.
func TestReviewH3SlowReaderIsCutByWriteTimeout(t *testing.T) {
	t.Parallel() // each its own node on its own ports
	o := newH3Origin(t)
	n := startH3Node(t, o.URL, "limits: {write_timeout: 500ms, idle_timeout: 2s, spool_bytes: 0}\n")
	c := dialRawH3(t, n, &quic.Config{KeepAlivePeriod: 100 * time.Millisecond,
		InitialStreamReceiveWindow: 32 << 10, MaxStreamReceiveWindow: 32 << 10,
		InitialConnectionReceiveWindow: 64 << 10, MaxConnectionReceiveWindow: 64 << 10})
	s, err := c.conn.OpenStream()
	if err != nil {
		t.Fatal(err)
	}
	_, _ = s.Write(headersFrame(reqFields("GET", "a.test", "/big")))
	_ = s.Close()
	time.Sleep(3 * time.Second) // 6x write_timeout without reading a byte
	_ = s.SetReadDeadline(time.Now().Add(10 * time.Second))
	status, _, body, err := readH3Response(t, s)
	t.Logf("status %s, %d bytes, err %v", status, len(body), err)
	if err == io.EOF && len(body) == 16<<20 {
		t.Errorf("an HTTP/3 reader stalled for 6x limits.write_timeout still got the whole 16 MiB: the write deadline is not enforced over HTTP/3")
	}
}

// TestReviewH3RequestBodies: bodies over HTTP/3 obey limits.max_body_bytes
// with and without a length, a body of unknown length goes to the origin
// with its Content-Length, and a body longer than its declared length never
// reaches the origin.
func TestReviewH3RequestBodies(t *testing.T) {
	t.Parallel() // each its own node on its own ports
	o := newH3Origin(t)
	n := startH3Node(t, o.URL, "limits: {max_body_bytes: 100KiB, body_timeout: 1s, min_body_rate: 1KiB}\n")
	c := dialRawH3(t, n, nil)
	send := func(path string, cl int, chunks ...[]byte) (string, []byte, error) {
		s, err := c.conn.OpenStream()
		if err != nil {
			t.Fatal(err)
		}
		var extra [][2]string
		if cl >= 0 {
			extra = append(extra, [2]string{"content-length", itoa(cl)})
		}
		_, _ = s.Write(headersFrame(reqFields("POST", "a.test", path, extra...)))
		for _, ch := range chunks {
			_, _ = s.Write(dataFrame(ch))
		}
		_ = s.Close()
		_ = s.SetReadDeadline(time.Now().Add(10 * time.Second))
		st, _, b, err := readH3Response(t, s)
		return st, b, err
	}
	big := bytes.Repeat([]byte("y"), 40<<10)
	if st, _, _ := send("/unknown-over", -1, big, big, big); st != "413" {
		t.Errorf("unknown-length 120 KiB body over a 100 KiB limit: status %q, want 413", st)
	}
	if st, _, _ := send("/declared-over", 120<<10, big, big, big); st != "413" {
		t.Errorf("declared 120 KiB body over a 100 KiB limit: status %q, want 413", st)
	}
	if st, b, _ := send("/unknown-small", -1, []byte("hello"), []byte(" world")); st != "200" || !strings.Contains(string(b), "len=11 body=11") {
		t.Errorf("unknown-length small body: %q %q, want the origin to see Content-Length 11", st, b)
	}
	if st, _, _ := send("/shorter-than-declared", 10, []byte("01234")); st == "200" {
		t.Errorf("a body shorter than its Content-Length was answered 200")
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, p := range []string{"/unknown-over", "/declared-over", "/shorter-than-declared"} {
		if b, ok := o.body[p]; ok {
			t.Errorf("%s reached the origin with %d bytes", p, len(b))
		}
	}
}

// TestReviewH3BodyLongerThanDeclaredIsNotForwarded: a request whose DATA
// frames carry more than its content-length is malformed, and an
// intermediary MUST NOT forward it (RFC 9114 §4.1.2, as RFC 9113 §8.1.1
// for HTTP/2). The edge reads exactly the declared bytes and sends the
// POST on without looking further (bufferBody skips readEOF for
// ProtoMajor != 1), so the origin executes it while the client is told
// the stream failed (H3_MESSAGE_ERROR): a client that retries has the
// origin run it twice.
func TestReviewH3BodyLongerThanDeclaredIsNotForwarded(t *testing.T) {
	t.Parallel() // each its own node on its own ports
	o := newH3Origin(t)
	n := startH3Node(t, o.URL, "")
	c := dialRawH3(t, n, nil)
	// A warm origin connection, as on any busy node.
	if resp, err := h3Client(n).Get("https://a.test/warm"); err == nil {
		resp.Body.Close()
	}
	reached := 0
	sizes := []int{70000} // through the spool: refused (spillBody keeps the error)
	for range 20 {
		sizes = append(sizes, 5) // in memory: io.ReadFull drops the error that came with the last bytes
	}
	for i, size := range sizes {
		s, err := c.conn.OpenStream()
		if err != nil {
			t.Fatal(err)
		}
		path := "/longer-" + itoa(i) + "-" + itoa(size)
		_, _ = s.Write(headersFrame(reqFields("POST", "a.test", path, [2]string{"content-length", itoa(size)})))
		_, _ = s.Write(dataFrame(bytes.Repeat([]byte("z"), size+10))) // one frame, then FIN
		_ = s.Close()
		_ = s.SetReadDeadline(time.Now().Add(10 * time.Second))
		st, _, _, err := readH3Response(t, s)
		time.Sleep(100 * time.Millisecond) // the client's stream is reset before the origin is asked
		o.mu.Lock()
		b, ok := o.body[path]
		o.mu.Unlock()
		if ok {
			reached++
			t.Logf("%s: a body 10 bytes longer than its content-length reached the origin (%d bytes) while the client got status %q, err %v", path, len(b), st, err)
		}
	}
	if reached > 0 {
		t.Errorf("%d of %d malformed POSTs (DATA longer than content-length) were forwarded to the origin", reached, len(sizes))
	}
}

// TestReviewH3StalledBodyIsTimedOut: a body that stops after its first
// bytes is cut by limits.body_timeout / min_body_rate over HTTP/3 too.
func TestReviewH3StalledBodyIsTimedOut(t *testing.T) {
	t.Parallel() // each its own node on its own ports
	o := newH3Origin(t)
	n := startH3Node(t, o.URL, "limits: {body_timeout: 500ms, min_body_rate: 1KiB}\n")
	c := dialRawH3(t, n, &quic.Config{KeepAlivePeriod: 100 * time.Millisecond})
	for _, cl := range []int{-1, 100000} {
		s, err := c.conn.OpenStream()
		if err != nil {
			t.Fatal(err)
		}
		var extra [][2]string
		if cl >= 0 {
			extra = append(extra, [2]string{"content-length", itoa(cl)})
		}
		_, _ = s.Write(headersFrame(reqFields("POST", "a.test", "/stall", extra...)))
		_, _ = s.Write(dataFrame([]byte("a")))
		start := time.Now()
		_ = s.SetReadDeadline(time.Now().Add(8 * time.Second))
		st, _, _, err := readH3Response(t, s)
		t.Logf("cl=%d: %q after %v (%v)", cl, st, time.Since(start).Round(time.Millisecond), err)
		if st == "" && time.Since(start) > 7*time.Second {
			t.Errorf("cl=%d: a stalled HTTP/3 upload was not answered within 8s (body_timeout 500ms)", cl)
		}
	}
}

// TestReviewH3NoEarlyData: a resumed HTTP/3 connection must not have a
// POST carried in 0-RTT accepted (no RFC 8470 handling exists: quic-go
// hands early requests to the handler like any other).
func TestReviewH3NoEarlyData(t *testing.T) {
	t.Parallel() // each its own node on its own ports
	o := newH3Origin(t)
	n := startH3Node(t, o.URL, "")
	tc := h3TLS()
	tc.ClientSessionCache = tls.NewLRUClientSessionCache(8)
	dial := func() *quic.Conn {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		c, err := quic.DialAddrEarly(ctx, h3Addr(n), tc, &quic.Config{})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	first := dial()
	<-first.HandshakeComplete()
	cc := (&http3.Transport{}).NewClientConn(first)
	req, _ := http.NewRequest("GET", "https://a.test/first", nil)
	if resp, err := cc.RoundTrip(req); err == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	time.Sleep(100 * time.Millisecond) // the ticket arrives after the handshake
	_ = first.CloseWithError(0, "")
	second := dial()
	defer second.CloseWithError(0, "")
	cc2 := (&http3.Transport{}).NewClientConn(second)
	req, _ = http.NewRequest("POST", "https://a.test/early", strings.NewReader("pay"))
	resp, err := cc2.RoundTrip(req)
	if err == nil {
		resp.Body.Close()
	}
	st := second.ConnectionState()
	t.Logf("resumed=%v used0RTT=%v err=%v", st.TLS.DidResume, st.Used0RTT, err)
	if st.Used0RTT {
		t.Errorf("the node accepted 0-RTT early data on HTTP/3 without RFC 8470 handling")
	}
}

// metricValue sums a counter of n's registry by name and one label pair.
func metricValue(t *testing.T, n *Node, name, label, value string) float64 {
	t.Helper()
	mfs, err := n.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == label && l.GetValue() == value {
					sum += m.GetCounter().GetValue()
				}
			}
		}
	}
	return sum
}

// TestReviewH3HostFieldDoesNotBreakPeerMAC: RFC 9114 §4.3.1 lets an
// HTTP/3 request carry a Host field equal to :authority; quic-go keeps it
// in r.Header (net/http's HTTP/2 server does too), and the proxy forwards
// r.Header whole. The cluster signs every field of the peer request,
// Host included, but Go's client never sends Header["Host"] and the peer's
// server never shows it: the peer refuses the request ("mac") and the miss
// goes to the origin, every time, for every such client.
func TestReviewH3HostFieldDoesNotBreakPeerMAC(t *testing.T) {
	t.Parallel() // each its own node on its own ports
	o := newH3Origin(t)
	clA, clB := freeAddr(t), freeAddr(t)
	cp, kp := writePair(t, t.TempDir(), "a", []string{"a.test"}, 1)
	start := func(id, cl, extra string) *Node {
		return startNodeYAML(t, "node_id: "+id+"\nlisten: '"+freeAddr(t)+"'\nadmin: {listen: '"+freeAddr(t)+"'}\n"+
			"origin: {url: '"+o.URL+"'}\n"+
			"cluster: {listen: '"+cl+"', peers: 'a="+clA+",b="+clB+"', secret: 'a-test-cluster-secret', heartbeat_period: 50ms}\n"+extra)
	}
	a := start("a", clA, "tls: {listen: '127.0.0.1:0', cert_file: '"+cp+"', key_file: '"+kp+"', http3: true}\n")
	b := start("b", clB, "")
	time.Sleep(500 * time.Millisecond) // membership
	c := dialRawH3(t, a, nil)
	ask := func(path string, withHost bool) string {
		s, err := c.conn.OpenStream()
		if err != nil {
			t.Fatal(err)
		}
		var extra [][2]string
		if withHost {
			extra = append(extra, [2]string{"host", "a.test"})
		}
		_, _ = s.Write(headersFrame(reqFields("GET", "a.test", path, extra...)))
		_ = s.Close()
		_ = s.SetReadDeadline(time.Now().Add(10 * time.Second))
		st, hdr, _, _ := readH3Response(t, s)
		if st != "200" {
			t.Fatalf("%s: status %q", path, st)
		}
		return hdr.Get("cache-status")
	}
	// Pages whose home is b reach b: ask enough of them without Host first.
	viaPeer := 0
	for i := range 20 {
		if cs := ask("/plain/"+itoa(i), false); strings.Contains(cs, "b; ") {
			viaPeer++
		}
	}
	if viaPeer == 0 {
		t.Skip("no page went through the peer: the cluster did not form")
	}
	before := metricValue(t, b, "edge_peer_request_rejections_total", "reason", "mac")
	viaPeerHost := 0
	for i := range 20 {
		if cs := ask("/host/"+itoa(i), true); strings.Contains(cs, "b; ") {
			viaPeerHost++
		}
	}
	rejected := metricValue(t, b, "edge_peer_request_rejections_total", "reason", "mac") - before
	t.Logf("without a host field %d of 20 misses went through peer b; with one %d of 20, and b refused %v peer requests as forged (mac)", viaPeer, viaPeerHost, rejected)
	if rejected > 0 || viaPeerHost < viaPeer/2 {
		t.Errorf("HTTP/3 requests carrying a Host field equal to :authority break the peer MAC: %v refused as 'mac' by b, %d of 20 through the peer (vs %d without)", rejected, viaPeerHost, viaPeer)
	}
}

// TestReviewH3RapidResetIsBoundedByTheStreamLimit: the stream limit (250,
// docs/operations.md: "HTTP/3 ... with the same stream limit") is what
// bounds one connection's work. quic-go gives a stream's credit back once
// the stream is closed both ways, whatever its handler is doing; a client
// that opens a request stream and at once resets it (HTTP/2's rapid reset,
// CVE-2023-44487, which net/http bounds by counting running handlers)
// starts handlers without bound on one connection.
func TestReviewH3RapidResetIsBoundedByTheStreamLimit(t *testing.T) {
	t.Parallel() // each its own node on its own ports
	var cur, peak atomic.Int64
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := cur.Add(1)
		defer cur.Add(-1)
		for {
			p := peak.Load()
			if n <= p || peak.CompareAndSwap(p, n) {
				break
			}
		}
		time.Sleep(3 * time.Second)
		w.Header().Set("Cache-Control", "max-age=600")
		_, _ = io.WriteString(w, "slow")
	}))
	t.Cleanup(origin.Close)
	n := startH3Node(t, origin.URL, "")
	c := dialRawH3(t, n, nil)
	const streams = 600
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Second)
	defer cancel()
	opened := 0
	for batch := 0; batch < streams/200; batch++ {
		var ss []*quic.Stream
		for range 200 {
			s, err := c.conn.OpenStreamSync(ctx)
			if err != nil {
				break
			}
			_, _ = s.Write(headersFrame(reqFields("GET", "a.test", "/rr/"+itoa(opened))))
			_ = s.Close()
			ss = append(ss, s)
			opened++
		}
		time.Sleep(50 * time.Millisecond) // the handlers have started
		for _, s := range ss {
			s.CancelRead(0x10c) // H3_REQUEST_CANCELLED: STOP_SENDING
		}
	}
	time.Sleep(1500 * time.Millisecond)
	t.Logf("opened and reset %d streams on one connection; the origin saw %d requests at once", opened, peak.Load())
	if peak.Load() > 250 {
		t.Errorf("one HTTP/3 connection drove %d concurrent origin requests by rapid reset: the 250-stream limit does not bound its handlers", peak.Load())
	}
}

// TestReviewH3HostsAndCookies: over HTTP/3 the site and the key follow
// :authority; a Host field that disagrees is refused, not used to pick
// another site; cookie crumbs are joined with "; " before the origin and
// the cache see them (RFC 9114 §4.2.1).
func TestReviewH3HostsAndCookies(t *testing.T) {
	t.Parallel() // each its own node on its own ports
	oa, ob := newH3Origin(t), newH3Origin(t)
	cp, kp := writePair(t, t.TempDir(), "a", []string{"a.test", "b.test"}, 1)
	n := startNodeYAML(t, "listen: '"+freeAddr(t)+"'\nadmin: {listen: '"+freeAddr(t)+"'}\n"+
		"tls: {listen: '127.0.0.1:0', cert_file: '"+cp+"', key_file: '"+kp+"', http3: true}\n"+
		"sites:\n  - name: a\n    hosts: [a.test]\n    origins: ['"+oa.URL+"']\n  - name: b\n    hosts: [b.test]\n    origins: ['"+ob.URL+"']\n")
	c := dialRawH3(t, n, nil)
	ask := func(fields [][2]string) (string, http.Header, string) {
		s, err := c.conn.OpenStream()
		if err != nil {
			t.Fatal(err)
		}
		_, _ = s.Write(headersFrame(fields))
		_ = s.Close()
		_ = s.SetReadDeadline(time.Now().Add(10 * time.Second))
		st, hdr, b, _ := readH3Response(t, s)
		return st, hdr, string(b)
	}
	// B fills /x on site b.
	if st, _, body := ask(reqFields("GET", "b.test", "/x")); st != "200" || !strings.Contains(body, "host=b.test") {
		t.Fatalf("b.test/x: %q %q", st, body)
	}
	// :authority a.test with Host b.test: refused, never b's page.
	if st, _, body := ask(reqFields("GET", "a.test", "/x", [2]string{"host", "b.test"})); st == "200" {
		t.Errorf(":authority a.test with host b.test answered %q %q", st, body)
	}
	// Host only (no :authority): site b, the same entry.
	f := [][2]string{{":method", "GET"}, {":scheme", "https"}, {":path", "/x"}, {"host", "B.Test."}}
	if st, hdr, body := ask(f); st != "200" || !strings.Contains(body, "host=b.test") || !strings.Contains(hdr.Get("cache-status"), "hit") {
		t.Errorf("host-only B.Test.: %q %q %q", st, body, hdr.Get("cache-status"))
	}
	// Cookie crumbs.
	st, _, body := ask(reqFields("GET", "a.test", "/cookie/1", [2]string{"cookie", "a=1"}, [2]string{"cookie", "b=2"}))
	if st != "200" || body != "cookie=a=1; b=2 n=1" {
		t.Errorf("split cookies reached the origin as %q (%s), want one field a=1; b=2", body, st)
	}
	// Another user's cookies on the same URL (Vary: Cookie) never get the
	// first user's page.
	_, _, body2 := ask(reqFields("GET", "a.test", "/cookie/1", [2]string{"cookie", "a=9"}, [2]string{"cookie", "b=8"}))
	if strings.Contains(body2, "a=1") {
		t.Errorf("a second user's request got %q", body2)
	}
}

// TestReviewH3ConnectIsNotForwarded: a reverse proxy has no CONNECT to
// offer (RFC 9110 §9.3.6 is for proxies), yet quic-go hands CONNECT and
// extended CONNECT (RFC 9220: it advertises SETTINGS_ENABLE_CONNECT_PROTOCOL
// on every connection) to the handler, and the proxy passes them on:
// the origin receives "CONNECT <its own address>" and, for a WebSocket
// over HTTP/3, "CONNECT /ws HTTP/1.1" with the :protocol lost. The same
// holds for CONNECT over HTTP/1.1 and HTTP/2 (servePass takes any method).
func TestReviewH3ConnectIsNotForwarded(t *testing.T) {
	t.Parallel() // each its own node on its own ports
	o := newH3Origin(t)
	n := startH3Node(t, o.URL, "")
	c := dialRawH3(t, n, nil)
	for _, f := range [][][2]string{
		{{":method", "CONNECT"}, {":authority", "a.test:443"}},
		{{":method", "CONNECT"}, {":protocol", "websocket"}, {":scheme", "https"}, {":authority", "a.test"}, {":path", "/ws"}},
	} {
		s, err := c.conn.OpenStream()
		if err != nil {
			t.Fatal(err)
		}
		_, _ = s.Write(headersFrame(f))
		_ = s.Close()
		_ = s.SetReadDeadline(time.Now().Add(5 * time.Second))
		st, hdr, _, err := readH3Response(t, s)
		t.Logf("%v: %q %q %v", f, st, hdr.Get("cache-status"), err)
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, r := range o.seen {
		t.Errorf("the origin received %s %q (%s) from an HTTP/3 CONNECT", r.Method, r.RequestURI, r.Proto)
	}
}

// TestReviewH3CountsAndLogs: each HTTP/3 request is counted once as h3,
// logged once with its protocol and cache result, and its Cache-Status
// says what happened (a miss, then a hit).
func TestReviewH3CountsAndLogs(t *testing.T) {
	t.Parallel() // each its own node on its own ports
	o := newH3Origin(t)
	logf := t.TempDir() + "/access.log"
	n := startH3Node(t, o.URL, "log: {access: '"+logf+"', access_format: json}\n")
	cl := h3Client(n)
	var statuses []string
	for range 3 {
		resp, err := cl.Get("https://a.test/counted")
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.ProtoMajor != 3 {
			t.Fatalf("proto %s", resp.Proto)
		}
		statuses = append(statuses, resp.Header.Get("Cache-Status"))
	}
	if !strings.Contains(statuses[0], "fwd=uri-miss") || !strings.HasSuffix(statuses[1], "; hit") || !strings.HasSuffix(statuses[2], "; hit") {
		t.Errorf("Cache-Status over HTTP/3: %q", statuses)
	}
	if v := metricValue(t, n, "edge_http_requests_by_protocol_total", "protocol", "h3"); v != 3 {
		t.Errorf("h3 requests counted %v, want 3", v)
	}
	deadline := time.Now().Add(5 * time.Second)
	var lines []string
	for time.Now().Before(deadline) {
		b, _ := readFileIfAny(logf)
		lines = strings.Split(strings.TrimSpace(b), "\n")
		if len(lines) >= 3 && lines[0] != "" {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if len(lines) != 3 {
		t.Fatalf("access log lines: %q", lines)
	}
	for i, want := range []string{`"cache":"miss"`, `"cache":"hit"`, `"cache":"hit"`} {
		if !strings.Contains(lines[i], `"proto":"HTTP/3.0"`) || !strings.Contains(lines[i], want) || !strings.Contains(lines[i], `"client":"127.0.0.1"`) {
			t.Errorf("access log line %d: %s", i, lines[i])
		}
	}
}

func readFileIfAny(p string) (string, error) {
	b, err := os.ReadFile(p)
	return string(b), err
}

// TestReviewH3IdleAndHugeHeaders: an HTTP/3 connection with no request
// open is closed after limits.idle_timeout even while the client PINGs,
// and a header block over limits.max_header_bytes is refused with 431.
func TestReviewH3IdleAndHugeHeaders(t *testing.T) {
	t.Parallel() // each its own node on its own ports
	o := newH3Origin(t)
	n := startH3Node(t, o.URL, "limits: {idle_timeout: 500ms, max_header_bytes: 4KiB}\n")
	c := dialRawH3(t, n, nil)
	s, _ := c.conn.OpenStream()
	_, _ = s.Write(headersFrame(reqFields("GET", "a.test", "/h", [2]string{"x-big", strings.Repeat("a", 8<<10)})))
	_ = s.Close()
	_ = s.SetReadDeadline(time.Now().Add(5 * time.Second))
	if st, _, _, _ := readH3Response(t, s); st != "431" {
		t.Errorf("an 8 KiB header over a 4 KiB limit: %q, want 431", st)
	}
	idle := dialRawH3(t, n, &quic.Config{KeepAlivePeriod: 100 * time.Millisecond})
	select {
	case <-idle.conn.Context().Done():
	case <-time.After(3 * time.Second):
		t.Errorf("an HTTP/3 connection with nothing open outlived idle_timeout (500ms) by 6x while PINGing")
	}
}
