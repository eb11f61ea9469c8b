package h2server

import (
	"net/http"
	"testing"
	"time"
)

// A review found (now mended): boundHeaderBlock (commit a48a43a) starts the ReadHeaderTimeout
// bound only once a whole 9-byte frame header is buffered (its Peek blocks
// with no deadline before that). A request head trickled one byte earlier
// than TestS32DosH2TrickledHeaderBlockOutlivesReadHeaderTimeout's (the
// first 8 bytes of a HEADERS frame's header, and nothing more) holds the
// connection until IdleTimeout + the GOAWAY grace again: the mend is
// bypassed by sending less.
//
// Steps: Server{ReadHeaderTimeout: 300ms, IdleTimeout: 20s}; a client sends
// the preface, SETTINGS, then 8 of the 9 bytes of a HEADERS frame header
// (length 16, type HEADERS, flags END_STREAM|END_HEADERS, stream id 1 cut
// after its third byte), and nothing more.
// Expected: the connection ends about ReadHeaderTimeout after the head
// began, as the s32 test expects of a head cut one frame later (8 s
// allowed).
// Got: it stays open until IdleTimeout + 1 s (21 s here, 121 s with the
// defaults). Severity low: an HTTP/2 connection that sends nothing after
// its SETTINGS is held as long (IdleTimeout), so the bound the commit adds
// does not shorten how long a slowloris client holds a connection slot;
// a bound from the end of the handshake, or from the first byte of any
// frame (Peek(1)), would.
func TestS33H2HeadTrickledInsideItsFrameHeaderIsNotBounded(t *testing.T) {
	srv := &Server{Handler: http.NotFoundHandler(), ReadHeaderTimeout: 300 * time.Millisecond,
		IdleTimeout: 20 * time.Second, WriteTimeout: time.Second}
	addr := rvServer(t, srv)
	c := rvDial(t, addr)
	// length 16 | type 0x1 HEADERS | flags 0x5 | stream id 1 (its last byte withheld)
	hdr := []byte{0, 0, 16, 0x1, 0x5, 0, 0, 0}
	c.wmu.Lock()
	_, err := c.nc.Write(hdr)
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
		t.Errorf("a HEADERS frame begun (8 of its 9 header bytes) still holds its connection %v later (ReadHeaderTimeout 300ms; it lasts until IdleTimeout, 20s)",
			time.Since(start).Round(time.Second))
	}
}
