package node

// A hostile review of the HTTPS listener's hit path at a graceful stop
// (Node.Run's drain): answers in progress must complete, idle connections
// must close, and no request may be answered once the stop has begun.

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edgecache/edge/config"
)

// s11tlsBigBytes is the size of the origin's /big: far more than the
// kernel buffers of a loopback connection, so a reader that stops holds
// the writer.
const s11tlsBigBytes = 12 << 20

// s11tlsOrigin serves /big (cacheable, s11tlsBigBytes), /slow (cacheable,
// after 2 s) and anything else (cacheable, small).
func s11tlsOrigin(t *testing.T) *httptest.Server {
	big := bytes.Repeat([]byte("0123456789abcdef"), s11tlsBigBytes/16)
	o := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=600")
		switch {
		case r.URL.Path == "/big":
			w.Header().Set("Content-Type", "application/octet-stream")
			_, _ = w.Write(big)
		case strings.HasPrefix(r.URL.Path, "/slow"):
			select {
			case <-time.After(2 * time.Second):
			case <-r.Context().Done():
				return
			}
			_, _ = io.WriteString(w, "slow "+r.URL.Path)
		default:
			_, _ = io.WriteString(w, "page "+r.URL.Path)
		}
	}))
	t.Cleanup(o.Close)
	return o
}

// s11tlsRun starts a node with a TLS listener whose stop the test
// controls: stop cancels Run's context and returns at once; done reports
// Run's end.
func s11tlsRun(t *testing.T, origin, extra string) (n *Node, stop func(), done <-chan error) {
	t.Helper()
	cp, kp := writePair(t, t.TempDir(), "a", []string{"a.test"}, 1)
	yaml := "origin: {url: '" + origin + "'}\nlisten: '" + freeAddr(t) + "'\nadmin: {listen: '" + freeAddr(t) + "'}\n" +
		"tls: {listen: '127.0.0.1:0', cert_file: '" + cp + "', key_file: '" + kp + "', http3: true}\n" +
		"cache: {slice_bytes: 0, max_object_bytes: 64MiB}\n" + extra
	cfg, err := config.LoadBytes([]byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	n, err = New(cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	d := make(chan error)
	go func() { _ = n.Run(ctx); close(d) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-d:
		case <-time.After(20 * time.Second):
			t.Errorf("Run did not return 20 s after the stop")
		}
	})
	return n, cancel, d
}

// s11tlsWarm asks path over HTTPS/1.1 until the node answers it from the
// store (twice, letting the stored form be made).
func s11tlsWarm(t *testing.T, n *Node, path string) {
	t.Helper()
	for range 2 {
		c, err := s11tlsDial(n.tls.ln.Addr().String(), "a.test")
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.WriteString(c, "GET "+path+" HTTP/1.1\r\nHost: a.test\r\nConnection: close\r\n\r\n")
		_, _ = io.Copy(io.Discard, c)
		c.Close()
		n.Proxy().Wait()
	}
}

// s11tlsReadHead reads one response's head from br and returns it.
func s11tlsReadHead(t *testing.T, br *bufio.Reader) *http.Response {
	t.Helper()
	resp, err := http.ReadResponse(br, &http.Request{Method: "GET"})
	if err != nil {
		t.Fatalf("reading the answer: %v", err)
	}
	return resp
}

// s11tlsStopMidHit asks each kind of connection for /big, reads its
// first MiB, stops the node, and reads the rest as the kind says: every
// body must arrive whole.
//   - "only hits": a client reading at 16 MiB/s.
//   - "handed first": a request net/http answered came first (net/http
//     then sees the connection idle while the loop writes the hit, and
//     closes it at Shutdown); read at 16 MiB/s.
//   - "old": only hits, its client pausing (well under write_timeout)
//     until the connection is 4.5 s old, then reading at 4 MiB/s: net/http's
//     Shutdown takes a connection it has read no request on for idle once
//     it is 5 to 6 s old, while this hit is still being written.
func s11tlsStopMidHit(t *testing.T, kinds ...string) {
	origin := s11tlsOrigin(t)
	hitPathModes(t, func(t *testing.T, on bool) {
		t.Parallel()
		n, stop, _ := s11tlsRun(t, origin.URL, hitPathYAML(on)+"shutdown_timeout: 15s\nlimits: {write_timeout: 8s}\n")
		// The "old" connection is made first: it ages while /big is stored.
		dial := func(kind string) (*tls.Conn, time.Time) {
			accepted := time.Now()
			c, err := s11tlsDial(n.tls.ln.Addr().String(), "a.test")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { c.Close() })
			return c, accepted
		}
		type early struct {
			c        *tls.Conn
			accepted time.Time
		}
		made := map[string]early{}
		for _, kind := range kinds {
			if kind == "old" {
				c, at := dial(kind)
				made[kind] = early{c, at}
			}
		}
		s11tlsWarm(t, n, "/big")
		before := n.hitM.Stats().Answered
		type conn struct {
			kind     string
			c        *tls.Conn
			body     io.Reader
			accepted time.Time
		}
		var conns []conn
		for _, kind := range kinds {
			e, ok := made[kind]
			if !ok {
				e.c, e.accepted = dial(kind)
			}
			c, accepted := e.c, e.accepted
			br := bufio.NewReaderSize(c, 4<<10)
			if kind == "handed first" {
				// A request net/http answers (no-cache is ServeHTTP's).
				_, _ = io.WriteString(c, "GET /small HTTP/1.1\r\nHost: a.test\r\nCache-Control: no-cache\r\n\r\n")
				resp := s11tlsReadHead(t, br)
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
			_, _ = io.WriteString(c, "GET /big HTTP/1.1\r\nHost: a.test\r\n\r\n")
			resp := s11tlsReadHead(t, br)
			if resp.StatusCode != 200 || resp.ContentLength != s11tlsBigBytes {
				t.Fatalf("%s: %d, %d bytes", kind, resp.StatusCode, resp.ContentLength)
			}
			if _, err := io.CopyN(io.Discard, resp.Body, 1<<20); err != nil {
				t.Fatal(err)
			}
			conns = append(conns, conn{kind, c, resp.Body, accepted})
		}
		if on && n.hitM.Stats().Answered-before < int64(len(kinds)) {
			t.Fatalf("the hit path answered %d of the %d /big hits", n.hitM.Stats().Answered-before, len(kinds))
		}
		stop()
		var wg sync.WaitGroup
		for _, cn := range conns {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rate := int64(16 << 20)
				if cn.kind == "old" {
					time.Sleep(time.Until(cn.accepted.Add(4500 * time.Millisecond)))
					rate = 4 << 20
				}
				_ = cn.c.SetReadDeadline(time.Now().Add(10 * time.Second))
				var got int64
				buf := make([]byte, 64<<10)
				start := time.Now()
				for {
					m, err := cn.body.Read(buf)
					got += int64(m)
					if err != nil {
						break
					}
					if ahead := time.Duration(got * int64(time.Second) / rate); ahead > time.Since(start) {
						time.Sleep(ahead - time.Since(start))
					}
				}
				if want := int64(s11tlsBigBytes - 1<<20); got != want {
					t.Errorf("%s: a hit under way when the stop began was cut: %d of the %d bytes left arrived", cn.kind, got, want)
				}
			}()
		}
		wg.Wait()
	})
}

// TestS11TLSStopCompletesAHitInProgress: a graceful stop begins while a
// large fresh hit is being written to a client that reads it at a steady
// pace; the whole body must arrive (within shutdown_timeout), as it does
// when net/http writes it.
func TestS11TLSStopCompletesAHitInProgress(t *testing.T) {
	s11tlsStopMidHit(t, "only hits", "handed first")
}

// TestS11TLSStopCompletesAHitOnAnOldConnection: the same on a connection
// that only ever had hits but is 5 s old when net/http looks at it during
// the drain (a browser's keep-alive connection usually is). Some 7 s:
// net/http's rule is 5 s.
func TestS11TLSStopCompletesAHitOnAnOldConnection(t *testing.T) {
	s11tlsStopMidHit(t, "old")
}

// TestS11TLSNoRequestAnsweredAfterStopBegan: once the stop has begun, the
// HTTPS listener answers no new request: not on a new connection, and not
// a next request on a keep-alive connection idle in the hit loop (whose
// connection must close), even while another listener (the plain one,
// with a slow request in flight) is still draining.
func TestS11TLSNoRequestAnsweredAfterStopBegan(t *testing.T) {
	origin := s11tlsOrigin(t)
	hitPathModes(t, func(t *testing.T, on bool) {
		t.Parallel()
		n, stop, done := s11tlsRun(t, origin.URL, hitPathYAML(on)+"shutdown_timeout: 6s\n")
		s11tlsWarm(t, n, "/h")
		// A keep-alive HTTPS connection, idle after a hit.
		idle, err := s11tlsDial(n.tls.ln.Addr().String(), "a.test")
		if err != nil {
			t.Fatal(err)
		}
		defer idle.Close()
		ibr := bufio.NewReader(idle)
		_, _ = io.WriteString(idle, "GET /h HTTP/1.1\r\nHost: a.test\r\n\r\n")
		resp := s11tlsReadHead(t, ibr)
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		// A plain request in flight: the origin takes 2 s.
		plain, err := net.Dial("tcp", n.PublicAddr())
		if err != nil {
			t.Fatal(err)
		}
		defer plain.Close()
		_, _ = io.WriteString(plain, "GET /slow-plain HTTP/1.1\r\nHost: a.test\r\n\r\n")
		time.Sleep(200 * time.Millisecond)
		stop()
		time.Sleep(300 * time.Millisecond) // the stop is under way
		select {
		case <-done:
			t.Fatal("Run returned with a request in flight")
		default:
		}
		var answered []string
		// A next request on the idle connection.
		_ = idle.SetDeadline(time.Now().Add(2 * time.Second))
		if _, err := io.WriteString(idle, "GET /h HTTP/1.1\r\nHost: a.test\r\n\r\n"); err == nil {
			if r, err := http.ReadResponse(ibr, &http.Request{Method: "GET"}); err == nil {
				answered = append(answered, "a keep-alive connection idle at the stop: "+r.Status+" "+r.Header.Get("Cache-Status"))
			}
		}
		// A new connection.
		if c, err := s11tlsDial(n.tls.ln.Addr().String(), "a.test"); err == nil {
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(2 * time.Second))
			_, _ = io.WriteString(c, "GET /h HTTP/1.1\r\nHost: a.test\r\n\r\n")
			if r, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: "GET"}); err == nil {
				answered = append(answered, "a new connection: "+r.Status+" "+r.Header.Get("Cache-Status"))
			}
		}
		// HTTP/3 (docs/operations.md: "streams opened after it begins are
		// refused with H3_REQUEST_REJECTED").
		h3 := h3Client(n)
		h3.Timeout = 2 * time.Second
		if r, err := h3.Get("https://a.test/h"); err == nil {
			_, _ = io.Copy(io.Discard, r.Body)
			r.Body.Close()
			answered = append(answered, "an HTTP/3 request: "+r.Status+" "+r.Header.Get("Cache-Status"))
		}
		for _, a := range answered {
			t.Errorf("after the stop began (the plain listener still draining a request), the HTTPS listener answered %s", a)
		}
		// The plain request in flight ends whole.
		_ = plain.SetDeadline(time.Now().Add(8 * time.Second))
		r, err := http.ReadResponse(bufio.NewReader(plain), &http.Request{Method: "GET"})
		if err != nil {
			t.Fatalf("the plain request in flight at the stop: %v", err)
		}
		b, _ := io.ReadAll(r.Body)
		if string(b) != "slow /slow-plain" {
			t.Fatalf("the plain request in flight at the stop: %q", b)
		}
	})
}

// TestS11TLSStopClosesIdleHitLoopConnections: with nothing in flight, a
// stop closes HTTPS/1.1 connections idle in the hit loop (only hits, so
// net/http sees them as new) at once, not after net/http's 5 s for new
// connections or the idle timeout, and Run returns promptly.
func TestS11TLSStopClosesIdleHitLoopConnections(t *testing.T) {
	origin := s11tlsOrigin(t)
	n, stop, done := s11tlsRun(t, origin.URL, hitPathYAML(true)+"shutdown_timeout: 10s\nlimits: {idle_timeout: 60s, read_header_timeout: 30s}\n")
	s11tlsWarm(t, n, "/h")
	var conns []*tls.Conn
	var brs []*bufio.Reader
	for i := range 3 {
		c, err := s11tlsDial(n.tls.ln.Addr().String(), "a.test")
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		br := bufio.NewReader(c)
		switch i {
		case 0: // idle after a hit
			_, _ = io.WriteString(c, "GET /h HTTP/1.1\r\nHost: a.test\r\n\r\n")
			resp := s11tlsReadHead(t, br)
			_, _ = io.Copy(io.Discard, resp.Body)
		case 1: // a partial head
			_, _ = io.WriteString(c, "GET /h HTTP/1.1\r\nHo")
		case 2: // nothing sent after the handshake
		}
		conns, brs = append(conns, c), append(brs, br)
	}
	time.Sleep(100 * time.Millisecond)
	start := time.Now()
	stop()
	var closed atomic.Int64
	var wg sync.WaitGroup
	for i, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = c.SetReadDeadline(time.Now().Add(4 * time.Second))
			_, err := brs[i].ReadByte()
			var ne net.Error
			if err != nil && (!errors.As(err, &ne) || !ne.Timeout()) {
				closed.Add(1)
				if d := time.Since(start); d > 2*time.Second {
					t.Errorf("connection %d closed %v after the stop", i, d)
				}
				return
			}
			t.Errorf("connection %d still open 4 s after the stop (err %v)", i, err)
		}()
	}
	wg.Wait()
	select {
	case <-done:
		if d := time.Since(start); d > 3*time.Second {
			t.Errorf("Run took %v to return with only idle connections", d)
		}
	case <-time.After(8 * time.Second):
		t.Errorf("Run had not returned 8 s after the stop")
	}
}

// TestS11TLSStopAnswersNoPipelinedRequestAfterTheOneInProgress: a client
// pipelines three requests for a large fresh page and reads nothing, so
// the node is blocked writing the first answer when the stop begins. The
// answer in progress completes; the requests behind it were not begun
// and must not be answered (net/http alone closes after the response in
// progress).
func TestS11TLSStopAnswersNoPipelinedRequestAfterTheOneInProgress(t *testing.T) {
	origin := s11tlsOrigin(t)
	hitPathModes(t, func(t *testing.T, on bool) {
		t.Parallel()
		n, stop, _ := s11tlsRun(t, origin.URL, hitPathYAML(on)+"shutdown_timeout: 10s\nlimits: {write_timeout: 8s}\n")
		s11tlsWarm(t, n, "/big")
		c, err := s11tlsDial(n.tls.ln.Addr().String(), "a.test")
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_, _ = io.WriteString(c, strings.Repeat("GET /big HTTP/1.1\r\nHost: a.test\r\n\r\n", 3))
		time.Sleep(500 * time.Millisecond) // the first answer fills the socket buffers
		stop()
		time.Sleep(200 * time.Millisecond)
		_ = c.SetReadDeadline(time.Now().Add(8 * time.Second))
		br := bufio.NewReader(c)
		var answers []string
		for {
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				break
			}
			got, _ := io.Copy(io.Discard, resp.Body)
			answers = append(answers, resp.Status+" "+resp.Header.Get("Cache-Status")+" "+itoa(int(got)))
		}
		if len(answers) == 0 || !strings.HasSuffix(answers[0], itoa(s11tlsBigBytes)) {
			t.Fatalf("the answer in progress at the stop did not complete: %q", answers)
		}
		if len(answers) > 1 {
			t.Errorf("after the stop began, %d pipelined requests not yet begun were answered: %q", len(answers)-1, answers[1:])
		}
	})
}
