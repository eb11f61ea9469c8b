package h2server

import (
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"golang.org/x/net/http2"
)

// A connection accepted just before Drain (a deploy's SIGTERM on a busy
// node always catches some in their first round trip): the server has
// written its SETTINGS and waits for the client's. Drain sends GOAWAY and
// arms the 1 s grace (a read deadline); the client's SETTINGS then
// arrives, and the read loop clears every read deadline after the first
// SETTINGS. The connection, draining, takes no stream and never closes:
// Conns() stays 1, net/http's Shutdown waits for it until its own deadline
// (shutdown_timeout, 15 s by default) and with limits.idle_timeout 0 the
// connection lives for good.
func TestDrainDuringTheHandshakeStillCloses(t *testing.T) {
	s := &Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "ok") })}
	addr := rvServer(t, s)
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	fr := http2.NewFramer(nc, nc)
	// The preface alone: the server answers with its SETTINGS and waits
	// for the client's first frame.
	if _, err := nc.Write([]byte(http2.ClientPreface)); err != nil {
		t.Fatal(err)
	}
	_ = nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	if f, err := fr.ReadFrame(); err != nil {
		t.Fatal(err)
	} else if _, ok := f.(*http2.SettingsFrame); !ok {
		t.Fatalf("first server frame %T", f)
	}
	for s.Conns() != 1 {
		time.Sleep(time.Millisecond)
	}
	s.Drain() // the deploy begins
	time.Sleep(100 * time.Millisecond)
	// The client's SETTINGS (its round trip), well inside the 1 s grace.
	if err := fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	// The client reads on (it has nothing to ask); a graceful close
	// ends the connection about goAwayGrace after the GOAWAY.
	closed := make(chan time.Duration, 1)
	start := time.Now()
	go func() {
		_ = nc.SetReadDeadline(time.Now().Add(6 * time.Second))
		for {
			if _, err := fr.ReadFrame(); err != nil {
				closed <- time.Since(start)
				return
			}
		}
	}()
	d := <-closed
	// The server forgets the connection just after it closes it.
	for wait := time.Now().Add(2 * time.Second); s.Conns() != 0 && time.Now().Before(wait); {
		time.Sleep(5 * time.Millisecond)
	}
	if s.Conns() != 0 || d > 5*time.Second {
		t.Fatalf("draining connection still open %v after the client's SETTINGS (server Conns()=%d); want it closed ~%v after GOAWAY", d.Round(time.Millisecond), s.Conns(), goAwayGrace)
	}
}

// Drain on a connection whose client has not sent its preface yet: the
// server's first frame must be SETTINGS (RFC 9113 §3.4: the server
// connection preface "MUST be the first frame the server sends"); edge
// sends GOAWAY first, which browsers and x/net's client take as a broken
// preface. The client then completes its preface within the grace and the
// connection stays open, draining, as above.
func TestDrainBeforeThePrefaceSendsSettingsFirst(t *testing.T) {
	s := &Server{Handler: http.NotFoundHandler()}
	addr := rvServer(t, s)
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	for s.Conns() != 1 {
		time.Sleep(time.Millisecond)
	}
	s.Drain()
	fr := http2.NewFramer(nc, nc)
	_, _ = nc.Write([]byte(http2.ClientPreface))
	_ = fr.WriteSettings()
	_ = nc.SetReadDeadline(time.Now().Add(4 * time.Second))
	var order []string
	var err2 error
	start := time.Now()
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			err2 = err
			break
		}
		order = append(order, f.Header().Type.String())
	}
	t.Logf("frames %v, then %v after %v", order, err2, time.Since(start).Round(time.Millisecond))
	for wait := time.Now().Add(2 * time.Second); s.Conns() != 0 && time.Now().Before(wait); {
		time.Sleep(5 * time.Millisecond)
	}
	if len(order) == 0 || order[0] != "SETTINGS" {
		t.Errorf("server's first frame is %v, want SETTINGS", order)
	}
	if s.Conns() != 0 {
		t.Errorf("draining connection still open after %v (Conns()=%d)", time.Since(start).Round(time.Millisecond), s.Conns())
	}
}

// A POST whose HEADERS carries a PRIORITY that depends on the stream
// itself is a stream error (RFC 9113 §5.3.1). edge returns it before it
// records the stream's ID as used, so the stream stays "idle" to it: the
// request's DATA, already on its way, is then a frame on an idle stream
// and ends the whole connection (GOAWAY PROTOCOL_ERROR), every other
// stream of that client with it. net/http's server records the ID first:
// the DATA gets RST_STREAM(STREAM_CLOSED) and the connection serves on.
func TestSelfDependentStreamResetsOnlyItself(t *testing.T) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "ok") })
	for _, name := range []string{"edge", "x/net"} {
		var addr string
		if name == "edge" {
			addr = rvServer(t, &Server{Handler: h})
		} else {
			addr = rvXNetServer(t, h, 0)
		}
		c := rvDial(t, addr)
		c.do(func(fr *http2.Framer) error {
			c.hb.Reset()
			for _, kv := range rvPairs(rvPost("/up")) {
				_ = c.enc.WriteField(kv)
			}
			return fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: c.hb.Bytes(), EndHeaders: true,
				Priority: http2.PriorityParam{StreamDep: 1, Weight: 15}})
		})
		c.data(1, true, []byte("body"))
		c.headers(3, true, rvGet("/after")...)
		resps, _ := c.collect(3*time.Second, nil, ended(3))
		got := rvSummary(resps[3])
		if ga := resps[0]; ga != nil {
			got += " conn: " + rvSummary(ga)
		}
		t.Logf("%s: stream 3 after the bad priority: %s", name, got)
		if name == "edge" && (resps[3] == nil || string(resps[3].body) != "ok") {
			t.Errorf("edge: the connection died of one stream's priority error: %s", got)
		}
	}
}
