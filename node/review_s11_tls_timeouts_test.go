package node

// A hostile review of the HTTPS listener's hit path: its timeouts
// (limits.read_header_timeout against a trickled head, limits.write_timeout
// against a client that stops reading) and what a client that is not
// speaking TLS gets, each compared with net/http alone (tuning.hit_path
// off) on the same listener.

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// s11tlsCutAfter runs steps on a new HTTPS/1.1 connection to n and
// returns how long after the handshake (or after the answer to prefix, a
// request sent first) the node closed it (or 0 if it was still open after
// limit). After delay, line is written a byte per TLS record 10 ms apart,
// then send a byte per record, one per gap.
func s11tlsCutAfter(t *testing.T, n *Node, prefix string, delay time.Duration, line string, gap time.Duration, send string, limit time.Duration) time.Duration {
	t.Helper()
	c, err := s11tlsDial(n.tls.ln.Addr().String(), "a.test")
	if err != nil {
		t.Error(err)
		return -1
	}
	defer c.Close()
	start := time.Now()
	br := bufio.NewReader(c)
	if prefix != "" {
		_, _ = io.WriteString(c, prefix)
		resp, err := http.ReadResponse(br, &http.Request{Method: "GET"})
		if err != nil {
			t.Errorf("the hit before the trickle: %v", err)
			return -1
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		start = time.Now()
	}
	closed := make(chan time.Duration, 1)
	go func() {
		_ = c.SetReadDeadline(start.Add(limit))
		b, err := br.ReadByte()
		var ne net.Error
		if err != nil && errors.As(err, &ne) && ne.Timeout() {
			closed <- 0
			return
		}
		if err == nil {
			line, _ := br.ReadString('\n')
			t.Logf("an answer after %v: %q", time.Since(start), string(b)+line)
		}
		closed <- time.Since(start)
	}()
	go func() {
		time.Sleep(delay)
		for i := 0; i < len(line); i++ {
			if _, err := c.Write([]byte{line[i]}); err != nil {
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
		for i := 0; i < len(send); i++ {
			if _, err := c.Write([]byte{send[i]}); err != nil {
				return
			}
			time.Sleep(gap)
		}
	}()
	return <-closed
}

// TestS11TLSSlowHeadIsCutAtReadHeaderTimeout: a head trickled a byte per
// 100 ms (one TLS record each) must be cut at read_header_timeout after
// the handshake, as net/http alone cuts it, however the trickle starts:
// at once, after a pause, or after a pause with a request line the loop
// hands to net/http for good (a POST) ended quickly. After a hit, the
// next head is cut no later than net/http cuts it.
func TestS11TLSSlowHeadIsCutAtReadHeaderTimeout(t *testing.T) {
	const rht = 600 * time.Millisecond
	head := "GET /h HTTP/1.1\r\nHost: a.test\r\nX-A: " + strings.Repeat("a", 60) + "\r\n\r\n"
	cases := []struct {
		name         string
		prefix       string
		delay, gap   time.Duration
		send         string
		bound        time.Duration // net/http alone's cut, plus slack
		fastThenSlow string        // sent quickly right after delay, before the trickle
	}{
		{"at once", "", 0, 100 * time.Millisecond, head, rht + 300*time.Millisecond, ""},
		{"after a pause", "", 500 * time.Millisecond, 100 * time.Millisecond, head, rht + 300*time.Millisecond, ""},
		{"after a pause, a POST line", "", 500 * time.Millisecond, 100 * time.Millisecond,
			"Host: a.test\r\nContent-Length: 1\r\n" + strings.Repeat("X-B: b\r\n", 10) + "\r\nx", rht + 300*time.Millisecond, "POST /p HTTP/1.1\r\n"},
	}
	sides := s11tlsPair(t, "limits: {read_header_timeout: 600ms, idle_timeout: 10s}\n", "/h")
	var wg sync.WaitGroup
	for _, tc := range cases {
		for i, s := range sides {
			wg.Add(1)
			go func() {
				defer wg.Done()
				d := s11tlsCutAfter(t, s.n, tc.prefix, tc.delay, tc.fastThenSlow, tc.gap, tc.send, 4*time.Second)
				mode := [2]string{"without the hit path", "with the hit path"}[i]
				switch {
				case d == 0:
					t.Errorf("%s, %s: a head trickled for 4 s was not cut (read_header_timeout %v)", tc.name, mode, rht)
				case d > tc.bound:
					t.Errorf("%s, %s: a trickled head was cut %v after the handshake; read_header_timeout is %v (net/http alone cuts it by %v)", tc.name, mode, d.Round(time.Millisecond), rht, tc.bound)
				default:
					t.Logf("%s, %s: cut after %v", tc.name, mode, d.Round(time.Millisecond))
				}
			}()
		}
	}
	// After a hit: the next head trickled; net/http waits for 4 bytes
	// under the idle timeout before its header clock starts, so the bound
	// is the 4 bytes' time plus read_header_timeout.
	for i, s := range sides {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d := s11tlsCutAfter(t, s.n, "GET /h HTTP/1.1\r\nHost: a.test\r\n\r\n", 0, "", 100*time.Millisecond, head, 4*time.Second)
			mode := [2]string{"without the hit path", "with the hit path"}[i]
			if d == 0 || d > 400*time.Millisecond+rht+300*time.Millisecond {
				t.Errorf("after a hit, %s: a trickled next head was cut after %v (0: not cut within 4 s)", mode, d)
			}
		}()
	}
	wg.Wait()
}

// TestS11TLSStalledReaderIsCutByWriteTimeout: a client that asks for a
// large fresh hit and reads nothing is cut after write_timeout, with the
// hit path as without it.
func TestS11TLSStalledReaderIsCutByWriteTimeout(t *testing.T) {
	origin := s11tlsOrigin(t)
	hitPathModes(t, func(t *testing.T, on bool) {
		t.Parallel()
		n, _, _ := s11tlsRun(t, origin.URL, hitPathYAML(on)+"limits: {write_timeout: 500ms}\n")
		s11tlsWarm(t, n, "/big")
		before := n.hitM.Stats().Answered
		c, err := s11tlsDial(n.tls.ln.Addr().String(), "a.test")
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_, _ = io.WriteString(c, "GET /big HTTP/1.1\r\nHost: a.test\r\n\r\n")
		time.Sleep(2500 * time.Millisecond) // 5x write_timeout without reading a byte
		_ = c.SetReadDeadline(time.Now().Add(3 * time.Second))
		got, _ := io.Copy(io.Discard, c)
		if got >= s11tlsBigBytes {
			t.Errorf("a reader stalled for 5x write_timeout still got all %d bytes", got)
		}
		if on && n.hitM.Stats().Answered == before {
			t.Errorf("the hit path did not answer the hit")
		}
	})
}

// TestS11TLSPlainHTTPOnTheTLSPort: a client speaking plain HTTP to the
// HTTPS port gets net/http's 400 ("Client sent an HTTP request to an
// HTTPS server") without the hit path; with it, the same.
func TestS11TLSPlainHTTPOnTheTLSPort(t *testing.T) {
	sides := s11tlsPair(t, "")
	var got [2]string
	var wg sync.WaitGroup
	for i, s := range sides {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := net.Dial("tcp", s.n.tls.ln.Addr().String())
			if err != nil {
				t.Error(err)
				return
			}
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(3 * time.Second))
			_, _ = io.WriteString(c, "GET /h HTTP/1.1\r\nHost: a.test\r\n\r\n")
			b, err := io.ReadAll(c)
			got[i] = string(b)
			if err != nil {
				got[i] += " (" + err.Error() + ")"
			}
		}()
	}
	wg.Wait()
	if got[0] != got[1] {
		t.Errorf("plain HTTP on the HTTPS port:\n without the hit path: %q\n with it:              %q", got[0], got[1])
	}
}

// TestS11TLSHandshakeTimeoutAsNetHTTP: a client that opens TCP to the
// HTTPS port and never finishes its handshake is cut when net/http alone
// cuts it: net/http bounds the handshake by the least of
// read_header_timeout and write_timeout (Server.tlsHandshakeTimeout).
func TestS11TLSHandshakeTimeoutAsNetHTTP(t *testing.T) {
	sides := s11tlsPair(t, "limits: {read_header_timeout: 2s, write_timeout: 300ms}\n")
	var took [2]time.Duration
	var wg sync.WaitGroup
	for i, s := range sides {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := net.Dial("tcp", s.n.tls.ln.Addr().String())
			if err != nil {
				t.Error(err)
				return
			}
			defer c.Close()
			start := time.Now()
			_ = c.SetReadDeadline(start.Add(4 * time.Second))
			_, _ = c.Read(make([]byte, 1))
			took[i] = time.Since(start)
		}()
	}
	wg.Wait()
	if took[1] > took[0]+500*time.Millisecond {
		t.Errorf("a handshake never begun was cut after %v without the hit path, %v with it", took[0].Round(time.Millisecond), took[1].Round(time.Millisecond))
	}
}
