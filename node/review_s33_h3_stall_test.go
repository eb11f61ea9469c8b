package node

// A hostile review (s33) of HTTP/3: a client that stops reading.

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/quic-go/quic-go"
)

// s33hOrigin serves /size/N: N bytes, cacheable for ten minutes.
func s33hOrigin(t *testing.T) *httptest.Server {
	t.Helper()
	o := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := strconv.Atoi(strings.TrimPrefix(r.URL.Path, "/size/"))
		w.Header().Set("Cache-Control", "max-age=600")
		w.Header().Set("Content-Type", "application/octet-stream")
		_, _ = w.Write(bytes.Repeat([]byte("h"), n))
	}))
	t.Cleanup(o.Close)
	return o
}

// s33hWarm fetches path over HTTP/3 until it is a hit.
func s33hWarm(t *testing.T, n *Node, path string) {
	t.Helper()
	cl := h3Client(n)
	for range 3 {
		resp, err := cl.Get("https://a.test" + path)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if strings.HasSuffix(resp.Header.Get("Cache-Status"), "; hit") {
			return
		}
	}
	t.Fatalf("%s never became a hit", path)
}

// A review found (now mended): limits.write_timeout ("a client reading slower than 32 KiB per
// this is disconnected") does not hold over HTTP/3 for a fresh hit of up
// to 32 KiB, which is most of what a CDN serves.
// Steps: a node with HTTP/3, write_timeout 500ms; /size/20000 and
// /size/3000 cached (fresh hits); a raw QUIC client whose stream receive
// window is 1 KiB asks for each and reads nothing, its connection kept
// alive by PINGs; 4 s later (8x write_timeout) it starts reading.
// Expected: the stream was reset once a write had blocked for
// write_timeout (as for the 16 MiB pass-through of
// TestReviewH3SlowReaderIsCutByWriteTimeout, and as over HTTP/1.1 and
// HTTP/2, whose http.Server has WriteTimeout).
// Got: the whole body arrives with a clean end: the handler (or quic-go's
// Finish, for a body under 4 KiB) sat in a write with no deadline.
// writeEntry extends the deadline for everything but a plain hit ("a fresh
// hit is written at once, within the deadline net/http set when the
// request arrived"), but the HTTP/3 server sets none: nothing but the
// client ends such a write. Why it matters: each stalled stream holds a
// handler goroutine and the entry's body, its connection never idles out
// (quic-go stops the idle timer while a request stream is open, and the
// client's PINGs keep QUIC's own alive), so a client holds its
// limits.max_connections slots and 250 goroutines per connection for as
// long as it likes.
func TestS33H3StalledReaderOfAHitIsCutByWriteTimeout(t *testing.T) {
	t.Parallel()
	o := s33hOrigin(t)
	n := startH3Node(t, o.URL, "limits: {write_timeout: 500ms, idle_timeout: 2s, spool_bytes: 0}\n")
	paths := []string{"/size/20000", "/size/3000"}
	for _, p := range paths {
		s33hWarm(t, n, p)
	}
	c := dialRawH3(t, n, &quic.Config{KeepAlivePeriod: 100 * time.Millisecond,
		InitialStreamReceiveWindow: 1 << 10, MaxStreamReceiveWindow: 1 << 10,
		InitialConnectionReceiveWindow: 64 << 10, MaxConnectionReceiveWindow: 64 << 10})
	// The control: a miss of the same size, whose writes extendWrite
	// bounds, is cut (the 1 KiB window is honoured).
	paths = append(paths, "/size/20001")
	var ss []*quic.Stream
	for _, p := range paths {
		s, err := c.conn.OpenStream()
		if err != nil {
			t.Fatal(err)
		}
		_, _ = s.Write(headersFrame(reqFields("GET", "a.test", p)))
		_ = s.Close()
		ss = append(ss, s)
	}
	time.Sleep(4 * time.Second) // 8x write_timeout, reading nothing
	if err := c.conn.Context().Err(); err != nil {
		return // the connection was closed: held
	}
	for i, s := range ss {
		_ = s.SetReadDeadline(time.Now().Add(10 * time.Second))
		st, hdr, body, err := readH3Response(t, s)
		want, _ := strconv.Atoi(strings.TrimPrefix(paths[i], "/size/"))
		t.Logf("%s: status %q cache-status %q, %d bytes, err %v", paths[i], st, hdr.Get("cache-status"), len(body), err)
		if i == len(paths)-1 {
			if err == io.EOF && len(body) == want {
				t.Skipf("the control (a miss) was not cut either: the client's window did not stall the writes")
			}
			continue
		}
		if err == io.EOF && len(body) == want {
			t.Errorf("%s (a fresh hit): a client that read nothing for 8x limits.write_timeout still got the whole %d bytes: no write deadline on a plain hit over HTTP/3", paths[i], want)
		}
	}
}

// HOLDS: a small answer (under quic-go's stream frame buffer) that its
// client never reads does not keep the connection: the handler returns,
// quic-go counts the stream done, and limits.idle_timeout closes the
// connection despite the client's PINGs, so its slot is given back.
func TestS33H3UnreadSmallAnswerIdlesOut(t *testing.T) {
	t.Parallel()
	o := s33hOrigin(t)
	n := startH3Node(t, o.URL, "limits: {write_timeout: 500ms, idle_timeout: 1s}\n")
	c := dialRawH3(t, n, &quic.Config{KeepAlivePeriod: 100 * time.Millisecond,
		InitialStreamReceiveWindow: 64, MaxStreamReceiveWindow: 64,
		InitialConnectionReceiveWindow: 64 << 10, MaxConnectionReceiveWindow: 64 << 10})
	s, err := c.conn.OpenStream()
	if err != nil {
		t.Fatal(err)
	}
	_, _ = s.Write(headersFrame(reqFields("GET", "a.test", "/size/300")))
	_ = s.Close()
	select {
	case <-c.conn.Context().Done():
		t.Logf("closed: %v", context.Cause(c.conn.Context()))
	case <-time.After(15 * time.Second):
		t.Errorf("an HTTP/3 connection with one unread 300-byte answer was still open 15x limits.idle_timeout later")
	}
}
