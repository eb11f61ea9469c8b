package node

// A hostile review (s33) of HTTP/3: the client's unidirectional streams.

import (
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/quic-go/quic-go"
)

// s33hStalledUniReaders counts the goroutines of this process blocked in
// quic-go's HTTP/3 reading the type of a unidirectional stream (not
// serving a control stream).
func s33hStalledUniReaders() int {
	buf := make([]byte, 16<<20)
	buf = buf[:runtime.Stack(buf, true)]
	n := 0
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "handleUnidirectionalStream") && !strings.Contains(g, "handleControlStream") &&
			strings.Contains(g, "quicvarint.Read") {
			n++
		}
	}
	return n
}

// A review found (now mended): a unidirectional stream that never brings its stream type holds
// a goroutine for as long as its connection lives: nothing bounds it the
// way limits.read_header_timeout bounds a request stream's HEADERS.
// Steps: a node with HTTP/3, read_header_timeout 300ms, idle_timeout 1s;
// a client opens 100 unidirectional streams (quic-go's default limit),
// writing on each the first byte of a two-byte stream type and nothing
// more, and keeps its connection in use with a GET every 300 ms; after
// 3 s (10x read_header_timeout) the goroutines reading those types are
// counted.
// Expected: the type (one varint) is due as promptly as a request's
// HEADERS, so such streams are ended after read_header_timeout (h3Front
// gives request streams a read deadline; the unidirectional ones get
// none) and their goroutines are gone.
// Got: about 100 goroutines per connection still blocked in
// quicvarint.Read (h3Front.handleConn starts one per stream with
// go hconn.HandleUnidirectionalStream and no deadline), plus the streams'
// state in quic-go. Why it matters: a well-behaved client opens three
// such streams; a hostile one keeps 100 goroutines and their buffers per
// connection for the price of one small request per idle_timeout, on as
// many connections as limits.max_connections allows (one client, with
// the per-client bound off by default): about a million goroutines at
// 10,000 connections (the default bound at an open-file limit of 20,000).
func TestS33H3StalledUnidirectionalStreamsAreTimedOut(t *testing.T) {
	t.Parallel()
	o := s33hOrigin(t)
	n := startH3Node(t, o.URL, "limits: {read_header_timeout: 300ms, idle_timeout: 1s}\n")
	before := s33hStalledUniReaders()
	c := dialRawH3(t, n, &quic.Config{KeepAlivePeriod: 100 * time.Millisecond})
	opened := 0
	for range 100 {
		s, err := c.conn.OpenUniStream() // after the control stream dialRawH3 opened
		if err != nil {
			break
		}
		if _, err := s.Write([]byte{0x40}); err != nil { // a two-byte varint's first byte
			t.Fatal(err)
		}
		opened++
	}
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) && c.conn.Context().Err() == nil {
		s, err := c.conn.OpenStream()
		if err != nil {
			t.Fatal(err)
		}
		_, _ = s.Write(headersFrame(reqFields("GET", "a.test", "/size/10")))
		_ = s.Close()
		_ = s.SetReadDeadline(time.Now().Add(10 * time.Second))
		if st, _, _, err := readH3Response(t, s); st != "200" {
			t.Logf("keep-alive request: %q %v", st, err)
		}
		time.Sleep(300 * time.Millisecond)
	}
	if err := c.conn.Context().Err(); err != nil {
		t.Logf("the connection was closed: %v", err)
		return
	}
	held := s33hStalledUniReaders() - before
	t.Logf("opened %d unidirectional streams with an unfinished type; %d goroutines still read their types 10x read_header_timeout later", opened, held)
	if held >= opened/2 && opened > 0 {
		t.Errorf("%d goroutines of the node still wait for the type of unidirectional streams opened 3s ago (read_header_timeout 300ms): nothing times them out", held)
	}
}
