package main

import (
	"bytes"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// The per-connection and per-stream memory docs/operations.md ("What the
// edge guarantees") documents, on top of cache.max_bytes and
// limits.max_buffered_bytes: a goroutine with its stack, net/http's 4 KiB
// read and write buffers and the 32 KiB copy buffer of a streamed body for
// an HTTP/1.1 connection; for an HTTP/2 stream its handler goroutine, its
// 4 KiB write buffer and the same copy buffer, and for its connection the
// framer and TLS record buffers (about 64 KiB). Coding state is not in
// them: it is charged to limits.max_buffered_bytes.
const (
	memPerH1Conn   = 96 << 10
	memPerH2Stream = 96 << 10
	memPerH2Conn   = 256 << 10
	// memRuntimeSlack covers what the process holds beyond its idle RSS
	// and the budgets while it works: the collector's headroom
	// (GOMEMLIMIT is store + budget + 64 MiB) and freed spans not yet
	// returned to the OS.
	memRuntimeSlack = 48 << 20
)

// compressibleText is n bytes of page-like text, varied enough that every
// response fills its own encoder's window.
func compressibleText(n int) []byte {
	var b bytes.Buffer
	for i := 0; b.Len() < n; i++ {
		fmt.Fprintf(&b, "<li class=\"row-%d\">item %d: %x</li>\n", i%7, i, (i*2654435761)&0xffffff)
	}
	return b.Bytes()[:n]
}

// TestMemoryBoundWithSlowCompressedReaders: 300 HTTP/1.1 clients and then
// 2 HTTP/2 connections × 200 streams ask compressible pages, cacheable and
// not, with Accept-Encoding: br, and never read their answers. Each open
// response would hold a brotli encoder (about 10 MiB at the library's
// default window before the budget charged them: 300 of them reached
// 0.35–1.1 GB). The edge's resident memory must stay within
// cache.max_bytes + limits.max_buffered_bytes + the documented constants
// per connection and stream, and a cached page must still be served.
func TestMemoryBoundWithSlowCompressedReaders(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	// The text is made once: 700 origin requests each formatting 512 KiB
	// in this race-instrumented process on a loaded machine kept the
	// origin from answering headers within the edge's 30 s, and the
	// probe then got a 504 for lack of an origin, not of memory. A
	// per-page first line keeps the pages distinct.
	page := compressibleText(512 << 10)
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		kind, n, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/"), "/")
		seed, _ := strconv.Atoi(n)
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		if kind == "c" {
			w.Header().Set("Cache-Control", "max-age=600")
		} else {
			w.Header().Set("Cache-Control", "no-store")
		}
		first := fmt.Sprintf("<!-- page %s/%d -->\n", kind, seed)
		_, _ = io.WriteString(w, first)
		_, _ = w.Write(page[len(first):])
	}))
	defer origin.Close()

	dir := t.TempDir()
	ca := newTestCA(t)
	now := time.Now()
	cert, key, _ := ca.leaf(t, dir, "m", 1, now.Add(-time.Hour), now.Add(time.Hour), "localhost")
	pub, tlsAddr, adm := freeAddr(t), freeAddr(t), freeAddr(t)
	const store, budget = 16 << 20, 16 << 20
	cfg := fmt.Sprintf(`origin: {url: "%s"}
listen: "%s"
admin: {listen: "%s"}
tls: {listen: "%s", cert_file: "%s", key_file: "%s"}
cache: {max_bytes: %d, max_object_bytes: 8MiB}
limits: {max_buffered_bytes: %d, write_timeout: 60s, idle_timeout: 120s}
`, origin.URL, pub, adm, tlsAddr, cert, key, store, budget)
	cfgFile := filepath.Join(dir, "edge.yaml")
	if err := os.WriteFile(cfgFile, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	edge := startBinary(t, plainEdge(t), "serve", "-c", cfgFile)
	waitUp(t, "http://"+adm+"/readyz")
	// Warm up: a cached page (the probe), and one page of each kind read
	// whole, so that idle RSS includes the code paths' first allocations.
	get(t, "http://"+pub+"/c/0")
	for _, p := range []string{"/c/0", "/u/0"} {
		req, _ := http.NewRequest("GET", "http://"+pub+p, nil)
		req.Header.Set("Accept-Encoding", "br")
		if resp, err := http.DefaultClient.Do(req); err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	}
	time.Sleep(500 * time.Millisecond)
	idle := rssBytes(t, edge.Process.Pid)

	var peak atomic.Int64
	sample := func(d time.Duration) {
		for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
			if rss := rssBytes(t, edge.Process.Pid); rss > peak.Load() {
				peak.Store(rss)
			}
		}
	}
	probe := func() {
		t.Helper()
		// Whether a cached page is still answered, not how fast: the
		// bound only stops a stuck test (a loaded CI machine running
		// every package under -race took more than 10 s once).
		c := &http.Client{Timeout: 60 * time.Second}
		resp, err := c.Get("http://" + pub + "/c/0")
		if err != nil {
			t.Fatalf("probe of a cached page: %v", err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("probe of a cached page: %d", resp.StatusCode)
		}
	}

	// 300 HTTP/1.1 clients that never read.
	const h1Conns = 300
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			_ = c.Close()
		}
	}()
	for i := range h1Conns {
		c, err := net.Dial("tcp", pub)
		if err != nil {
			t.Fatal(err)
		}
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetReadBuffer(4 << 10) // the kernel holds little for us: the edge must
		}
		conns = append(conns, c)
		kind := "c"
		if i%2 == 1 {
			kind = "u"
		}
		fmt.Fprintf(c, "GET /%s/%d HTTP/1.1\r\nHost: localhost\r\nAccept-Encoding: br\r\n\r\n", kind, 1000+i)
	}
	sample(4 * time.Second)
	probe()
	h1Peak := peak.Load()
	h1Limit := idle + store + budget + h1Conns*memPerH1Conn + memRuntimeSlack
	t.Logf("HTTP/1.1: idle RSS %.1f MiB, peak %.1f MiB with %d slow br readers; bound %.1f MiB (store %d MiB + budget %d MiB + %d × %d KiB + %d MiB slack)",
		mib(idle), mib(h1Peak), h1Conns, mib(h1Limit), store>>20, budget>>20, h1Conns, memPerH1Conn>>10, memRuntimeSlack>>20)
	if h1Peak > h1Limit {
		t.Errorf("HTTP/1.1: peak RSS %.1f MiB exceeds the bound %.1f MiB", mib(h1Peak), mib(h1Limit))
	}
	for _, c := range conns {
		_ = c.Close()
	}
	conns = nil
	time.Sleep(time.Second)

	// 2 HTTP/2 connections × 200 streams whose flow-control window is
	// never opened: the edge can send no DATA at all.
	const h2Conns, h2Streams = 2, 200
	peak.Store(0)
	base := rssBytes(t, edge.Process.Pid)
	for c := range h2Conns {
		conn := dialH2NoWindow(t, tlsAddr, ca)
		conns = append(conns, conn.Conn)
		for s := range h2Streams {
			kind := "c"
			if s%2 == 1 {
				kind = "u"
			}
			conn.get(t, uint32(2*s+1), fmt.Sprintf("/%s/%d", kind, 5000+c*1000+s))
		}
	}
	sample(4 * time.Second)
	probe()
	h2Peak := peak.Load()
	h2Limit := max(idle, base) + store + budget + h2Conns*memPerH2Conn + h2Conns*h2Streams*memPerH2Stream + memRuntimeSlack
	t.Logf("HTTP/2: RSS before %.1f MiB, peak %.1f MiB with %d × %d stalled br streams; bound %.1f MiB", mib(base), mib(h2Peak), h2Conns, h2Streams, mib(h2Limit))
	if h2Peak > h2Limit {
		t.Errorf("HTTP/2: peak RSS %.1f MiB exceeds the bound %.1f MiB", mib(h2Peak), mib(h2Limit))
	}
}

func mib(n int64) float64 { return float64(n) / (1 << 20) }

// h2Conn is a raw HTTP/2 client connection.
type h2Conn struct {
	*tls.Conn
	fr  *http2.Framer
	enc *hpack.Encoder
	buf bytes.Buffer
}

// dialH2NoWindow opens an HTTP/2 connection that announces a zero initial
// stream window and never sends WINDOW_UPDATE, and reads nothing after
// the server's settings.
func dialH2NoWindow(t *testing.T, addr string, ca *testCA) *h2Conn {
	t.Helper()
	tc, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: ca.pool, ServerName: "localhost", NextProtos: []string{"h2"}})
	if err != nil {
		t.Fatal(err)
	}
	if tc.ConnectionState().NegotiatedProtocol != "h2" {
		t.Fatalf("ALPN chose %q, not h2", tc.ConnectionState().NegotiatedProtocol)
	}
	if _, err := io.WriteString(tc, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	c := &h2Conn{Conn: tc, fr: http2.NewFramer(tc, tc)}
	c.enc = hpack.NewEncoder(&c.buf)
	if err := c.fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 0}); err != nil {
		t.Fatal(err)
	}
	// Acknowledge the server's settings so that it applies ours; read
	// until then (the server also sends a WINDOW_UPDATE for the
	// connection).
	_ = tc.SetReadDeadline(time.Now().Add(10 * time.Second))
	for {
		f, err := c.fr.ReadFrame()
		if err != nil {
			t.Fatal(err)
		}
		if sf, ok := f.(*http2.SettingsFrame); ok && !sf.IsAck() {
			if err := c.fr.WriteSettingsAck(); err != nil {
				t.Fatal(err)
			}
			break
		}
	}
	return c
}

// get opens stream id with a GET for path that accepts br.
func (c *h2Conn) get(t *testing.T, id uint32, path string) {
	t.Helper()
	c.buf.Reset()
	for _, f := range [][2]string{{":method", "GET"}, {":scheme", "https"}, {":authority", "localhost"}, {":path", path}, {"accept-encoding", "br"}} {
		_ = c.enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	if err := c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: c.buf.Bytes(), EndStream: true, EndHeaders: true}); err != nil {
		t.Fatal(err)
	}
}
