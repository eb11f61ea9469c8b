package h2server

import (
	"net/http"
	"testing"
	"time"

	"golang.org/x/net/http2"
)

// A review found (now mended: boundHeaderBlock) an HTTP/2 request head trickled (a HEADERS frame without
// END_HEADERS, whose CONTINUATION never comes) is not bounded by
// ReadHeaderTimeout (limits.read_header_timeout): the connection is held
// until IdleTimeout (limits.idle_timeout, 120 s by default, twelve times
// the 10 s header timeout), then one more second of GOAWAY grace.
//
// Steps: Server{ReadHeaderTimeout: 300ms, IdleTimeout: 20s}; a client sends
// the preface, SETTINGS, then the first 3 bytes of a GET's header block in
// a HEADERS frame without END_HEADERS, and nothing more.
// Expected: the connection ends about ReadHeaderTimeout after the head
// began (as HTTP/1.1's loop and net/http end a head not whole in time, and
// as node/h3front.go bounds each HTTP/3 request stream's HEADERS, "as on
// TCP" in docs/operations.md); the test allows 8 s.
// Got: it stays open until IdleTimeout + 1 s (21 s here; 121 s with the
// defaults): the read deadline is cleared after the client's SETTINGS and
// never set again for a header block, and the loop, blocked reading the
// CONTINUATION, cannot end it. So the slowloris the header timeout "stops"
// works over HTTP/2: each such connection holds a limits.max_connections
// (or max_connections_per_client) slot, a TLS conn and its buffers 12×
// longer than on HTTP/1.1, so one client needs 12× fewer connections to
// fill the node's connection bound (others are then refused at accept).
func TestS32DosH2TrickledHeaderBlockOutlivesReadHeaderTimeout(t *testing.T) {
	srv := &Server{Handler: http.NotFoundHandler(), ReadHeaderTimeout: 300 * time.Millisecond,
		IdleTimeout: 20 * time.Second, WriteTimeout: time.Second}
	addr := rvServer(t, srv)
	c := rvDial(t, addr)
	c.wmu.Lock()
	c.hb.Reset()
	for _, f := range rvPairs(rvGet("/")) {
		_ = c.enc.WriteField(f)
	}
	blk := c.hb.Bytes()
	err := c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: blk[:3], EndStream: true, EndHeaders: false})
	c.wmu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	closed := make(chan struct{})
	go func() {
		for range c.frames { // SETTINGS, its ACK, WINDOW_UPDATE, then GOAWAY and EOF
		}
		close(closed)
	}()
	select {
	case <-closed:
		t.Logf("closed %v after the head began", time.Since(start).Round(time.Millisecond))
	case <-time.After(8 * time.Second):
		t.Errorf("a header block begun and never finished still holds its connection %v later (ReadHeaderTimeout 300ms; it lasts until IdleTimeout, 20s)",
			time.Since(start).Round(time.Second))
	}
}
