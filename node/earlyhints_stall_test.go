package node

import (
	"bytes"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// TestEarlyHintsToAStalledLeaderHoldNoJoiner: the leader of a shared miss
// reads nothing (its socket full of a large answer on another stream of
// its HTTP/2 connection, edge's server), and its origin sends a 103. The
// 103 cannot be written; another user's request, which joined the fetch,
// still gets the final answer as soon as the origin sends it. When the
// relay wrote on the origin transport's goroutine, the one that goes on to
// read the final answer, the joiner waited on the leader's socket until
// its write timeout (a hostile review's TestS38HintRelayToAStalledLeader-
// HoldsEveryJoiner, on net/http's HTTP/2 server, where hints are now not
// relayed at all).
func TestEarlyHintsToAStalledLeaderHoldNoJoiner(t *testing.T) {
	release := make(chan struct{})
	var sharedCalls atomic.Int64
	big := bytes.Repeat([]byte("x"), 1<<20)
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/big":
			w.Header().Set("Cache-Control", "no-store")
			for range 48 {
				if _, err := w.Write(big); err != nil {
					return
				}
			}
		case "/shared":
			sharedCalls.Add(1)
			w.Header().Set("Link", "</leader.css>; rel=preload; as=style")
			w.WriteHeader(http.StatusEarlyHints)
			w.Header().Del("Link")
			select {
			case <-release:
			case <-r.Context().Done():
				return
			}
			w.Header().Set("Cache-Control", "max-age=600")
			_, _ = io.WriteString(w, "shared page")
		}
	}))
	defer origin.Close()
	defer close(release)
	cp, kp := writePair(t, t.TempDir(), "a", []string{"a.test"}, 1)
	n := startNode(t, origin.URL, "tls: {listen: '"+freeAddr(t)+"', cert_file: '"+cp+"', key_file: '"+kp+"'}\ntuning: {http2_server: edge}\n")
	addr := n.tls.ln.Addr().String()

	// The leader: a tiny receive buffer and a huge flow-control window;
	// it asks for /big, then /shared, and reads nothing after the
	// handshake.
	d := &net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
		return c.Control(func(fd uintptr) { _ = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) })
	}}
	raw, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	conn := tls.Client(raw, &tls.Config{InsecureSkipVerify: true, ServerName: "a.test", NextProtos: []string{"h2"}}) //nolint:gosec // a test certificate
	defer conn.Close()
	if err := conn.Handshake(); err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(conn, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(conn, conn)
	_ = fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1 << 30})
	_ = fr.WriteWindowUpdate(0, 1<<30)
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatal(err)
		}
		if s, ok := f.(*http2.SettingsFrame); ok && !s.IsAck() {
			_ = fr.WriteSettingsAck()
			break
		}
	}
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	get := func(id uint32, path string) {
		hb.Reset()
		for _, f := range [][2]string{{":method", "GET"}, {":scheme", "https"}, {":authority", "a.test"}, {":path", path}} {
			_ = enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
		}
		if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: hb.Bytes(), EndStream: true, EndHeaders: true}); err != nil {
			t.Fatal(err)
		}
	}
	get(1, "/big")
	// Setting the stage, not timing anything: a busy machine that has
	// not filled the leader's socket by then makes the test pass without
	// testing, never fail.
	time.Sleep(500 * time.Millisecond) // the node fills the leader's socket with /big
	get(3, "/shared")
	waitFor(t, "the leader's fetch is at the origin", func() bool { return sharedCalls.Load() == 1 })
	time.Sleep(200 * time.Millisecond) // its 103 reaches the node

	// Another user asks for the same page and joins the leader's fetch.
	joiner := &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true, ServerName: "a.test"}, //nolint:gosec // a test certificate
	}}
	done := make(chan string, 1)
	go func() {
		req, _ := http.NewRequest("GET", "https://"+addr+"/shared", nil)
		req.Host = "a.test"
		resp, err := joiner.Do(req)
		if err != nil {
			done <- err.Error()
			return
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		done <- string(b)
	}()
	time.Sleep(300 * time.Millisecond) // the joiner joins the fetch
	release <- struct{}{}
	select {
	case got := <-done:
		if got != "shared page" {
			t.Fatalf("another user's request, which joined the fetch a stalled client led, got %q", got)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("another user's request, which joined the fetch a stalled client led, had no answer 15 s after the origin's: it waits on the leader's socket")
	}
}
