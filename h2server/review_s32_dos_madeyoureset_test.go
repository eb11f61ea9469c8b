package h2server

import (
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
)

// Withstood: "MadeYouReset" (CVE-2025-8671). The client makes the server
// reset each stream right after its HEADERS, with frames that are stream
// errors (DATA on a stream half-closed by END_STREAM, WINDOW_UPDATE of 0),
// instead of sending RST_STREAM itself. Handlers that ignore their context
// stay bounded by resetHandlersFactor × MaxConcurrentStreams, the same as
// for client resets, and the connection still answers.
func TestS32DosMadeYouResetIsBounded(t *testing.T) {
	var running, maxRunning, started atomic.Int64
	release := make(chan struct{})
	srv := &Server{MaxConcurrentStreams: 10, WriteTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		started.Add(1)
		n := running.Add(1)
		defer running.Add(-1)
		for m := maxRunning.Load(); n > m && !maxRunning.CompareAndSwap(m, n); m = maxRunning.Load() {
		}
		<-release // ignores its context, as a handler waiting on an origin may
	})}
	addr := rvServer(t, srv)
	defer close(release)
	c := rvDial(t, addr)
	var resets, refused atomic.Int64
	pong := make(chan struct{}, 1)
	go func() {
		for f := range c.frames {
			switch f := f.(type) {
			case *http2.RSTStreamFrame:
				if f.ErrCode == http2.ErrCodeRefusedStream {
					refused.Add(1)
				} else {
					resets.Add(1)
				}
			case *http2.PingFrame:
				if f.IsAck() {
					pong <- struct{}{}
				}
			}
		}
	}()
	for i := uint32(0); i < 1000; i++ {
		id := 1 + 2*i
		c.headers(id, true, rvGet("/")...)
		if i%2 == 0 {
			c.data(id, false, []byte("x")) // DATA after END_STREAM: STREAM_CLOSED
		} else {
			c.do(func(fr *http2.Framer) error {
				return fr.WriteRawFrame(http2.FrameWindowUpdate, 0, id, []byte{0, 0, 0, 0})
			}) // PROTOCOL_ERROR
		}
	}
	c.do(func(fr *http2.Framer) error { return fr.WritePing(false, [8]byte{7}) })
	select {
	case <-pong:
	case <-time.After(20 * time.Second):
		t.Fatal("no PING answer after the streams")
	}
	t.Logf("handlers started %d, at most %d at once; server resets %d, refused %d", started.Load(), maxRunning.Load(), resets.Load(), refused.Load())
	if m := maxRunning.Load(); m > resetHandlersFactor*10 {
		t.Errorf("%d handlers at once on a connection of 10 streams, reset by the server on the client's cue; want at most %d", m, resetHandlersFactor*10)
	}
	if refused.Load() == 0 {
		t.Errorf("no stream refused after 1000 server-reset streams with handlers still running")
	}
}
