package h2server

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"
)

// Request trailers a client sends (HEADERS after the body, declared in
// Trailer) must reach the handler in r.Trailer once the body is read, as
// net/http's HTTP/2 server delivers them (gRPC-style and chunked uploads).
func TestReviewRequestTrailersDelivered(t *testing.T) {
	got := make(chan string, 1)
	srv := &Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		got <- fmt.Sprintf("body=%q err=%v trailer=%v", b, err, r.Trailer)
	})}
	addr := rvServer(t, srv)
	client := rvTransport(addr)
	pr, pw := io.Pipe()
	req, _ := http.NewRequest("POST", "http://a.test/up", pr)
	req.Trailer = http.Header{"X-Checksum": nil}
	go func() {
		_, _ = io.WriteString(pw, "hello")
		req.Trailer.Set("X-Checksum", "abc123")
		pw.Close()
	}()
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	select {
	case s := <-got:
		t.Log(s)
		if !strings.Contains(s, "X-Checksum:[abc123]") {
			t.Errorf("the handler never saw the request trailer: %s", s)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no answer")
	}
}

// After the client resets a stream, the server must send nothing more on
// it (RFC 9113 §5.1: no frames but PRIORITY on a closed stream); net/http's
// server drops a late handler's writes.
func TestReviewNoFramesAfterClientReset(t *testing.T) {
	release := make(chan struct{})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-release // a handler that does not watch its context
		w.Header().Set("Trailer", "X-Sum")
		if r.URL.Path == "/body" {
			io.WriteString(w, "late body")
		}
		w.Header().Set("X-Sum", "1")
	})
	for _, srvName := range []string{"edge", "x/net"} {
		var addr string
		if srvName == "edge" {
			addr = rvServer(t, &Server{Handler: h})
		} else {
			addr = rvXNetServer(t, h, 0)
		}
		c := rvDial(t, addr)
		c.headers(1, true, rvGet("/empty")...)
		c.headers(3, true, rvGet("/body")...)
		c.collect(200*time.Millisecond, nil, func(map[uint32]*rvResp) bool { return false })
		c.do(func(fr *http2.Framer) error {
			_ = fr.WriteRSTStream(1, http2.ErrCodeCancel)
			return fr.WriteRSTStream(3, http2.ErrCodeCancel)
		})
		time.Sleep(100 * time.Millisecond)
		release <- struct{}{}
		release <- struct{}{}
		resps, _ := c.collect(500*time.Millisecond, nil, func(map[uint32]*rvResp) bool { return false })
		t.Logf("%s: stream 1 after RST: %s", srvName, rvSummary(resps[1]))
		t.Logf("%s: stream 3 after RST: %s", srvName, rvSummary(resps[3]))
		if srvName == "edge" && (resps[1] != nil || resps[3] != nil) {
			t.Errorf("edge sent frames on streams the client had reset")
		}
	}
}

// A request with Expect: 100-continue gets 100 Continue when the handler
// first reads its body (net/http's HTTP/2 server does so); a client waits
// for it before sending the body (curl waits 1 s, then sends anyway).
func TestReviewExpectContinue(t *testing.T) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		w.Write(b)
	})
	for _, srvName := range []string{"edge", "x/net"} {
		var addr string
		if srvName == "edge" {
			addr = rvServer(t, &Server{Handler: h})
		} else {
			addr = rvXNetServer(t, h, 0)
		}
		c := rvDial(t, addr)
		c.headers(1, false, rvPost("/up", "expect", "100-continue", "content-length", "2")...)
		resps, ok := c.collect(time.Second, nil, func(m map[uint32]*rvResp) bool { return m[1] != nil && m[1].status != "" })
		t.Logf("%s: interim answer within 1 s: %v %s", srvName, ok, rvSummary(resps[1]))
		if srvName == "edge" && !ok {
			t.Errorf("edge never sends 100 Continue: the client waits its own timeout before every such upload")
		}
	}
}

// Closing a request body must wake a goroutine blocked reading it (as
// net/http's HTTP/2 body does, and as http.Transport relies on when the
// origin answers before the upload ends: it closes the body its write loop
// is reading).
func TestReviewBodyCloseWakesReader(t *testing.T) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		done := make(chan error, 1)
		go func() {
			_, err := io.Copy(io.Discard, r.Body)
			done <- err
		}()
		time.Sleep(100 * time.Millisecond)
		r.Body.Close()
		select {
		case err := <-done:
			fmt.Fprintf(w, "reader woke: %v", err)
		case <-time.After(2 * time.Second):
			fmt.Fprint(w, "reader still blocked 2 s after Close")
		}
	})
	for _, srvName := range []string{"edge", "x/net"} {
		var addr string
		if srvName == "edge" {
			addr = rvServer(t, &Server{Handler: h})
		} else {
			addr = rvXNetServer(t, h, 0)
		}
		c := rvDial(t, addr)
		c.headers(1, false, rvPost("/up")...)
		c.data(1, false, []byte("some"))
		resps, _ := c.collect(4*time.Second, nil, ended(1))
		t.Logf("%s: %s", srvName, rvSummary(resps[1]))
		if srvName == "edge" && !strings.Contains(string(resps[1].body), "woke") {
			t.Errorf("edge: Body.Close did not wake the blocked reader")
		}
	}
}

// The server answers an upload early and resets the rest (RST_STREAM
// NO_ERROR); the client's trailers were already on their way. RFC 9113
// §5.1: frames on a stream the endpoint reset are discarded — the
// connection, and the other streams on it, must survive.
func TestReviewLateTrailersAfterEarlyAnswer(t *testing.T) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			time.Sleep(500 * time.Millisecond)
		}
		io.WriteString(w, "early")
	})
	for _, srvName := range []string{"edge", "x/net"} {
		var addr string
		if srvName == "edge" {
			addr = rvServer(t, &Server{Handler: h})
		} else {
			addr = rvXNetServer(t, h, 0)
		}
		c := rvDial(t, addr)
		c.headers(1, true, rvGet("/slow")...) // another stream in flight
		c.headers(3, false, rvPost("/up")...)
		c.data(3, false, []byte("part"))
		resps, _ := c.collect(time.Second, nil, ended(3)) // early answer + RST
		c.data(3, false, []byte("more"))                  // in flight before the client saw the RST
		c.headers(3, true, "x-checksum", "1")             // and the trailers
		resps, _ = c.collect(2*time.Second, resps, ended(1))
		t.Logf("%s: stream 3: %s | stream 1: %s | conn: %v", srvName, rvSummary(resps[3]), rvSummary(resps[1]), resps[0])
		if srvName == "edge" && (resps[1] == nil || !resps[1].ended) {
			t.Errorf("edge: late trailers on a reset stream killed the connection and the other stream")
		}
	}
}

// http.ResponseController.SetReadDeadline bounds a handler's body reads
// (net/http's HTTP/2 server supports it; the proxy's limits.body_timeout and
// min_body_rate are built on it).
func TestReviewSetReadDeadline(t *testing.T) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		err := http.NewResponseController(w).SetReadDeadline(time.Now().Add(200 * time.Millisecond))
		start := time.Now()
		done := make(chan string, 1)
		go func() {
			_, rerr := io.ReadAll(r.Body)
			done <- fmt.Sprintf("read ended after %v: %v", time.Since(start).Round(100*time.Millisecond), rerr)
		}()
		select {
		case s := <-done:
			fmt.Fprintf(w, "SetReadDeadline: %v; %s", err, s)
		case <-time.After(2 * time.Second):
			fmt.Fprintf(w, "SetReadDeadline: %v; read still blocked after 2 s", err)
		}
	})
	for _, srvName := range []string{"edge", "x/net"} {
		var addr string
		if srvName == "edge" {
			addr = rvServer(t, &Server{Handler: h})
		} else {
			addr = rvXNetServer(t, h, 0)
		}
		c := rvDial(t, addr)
		c.headers(1, false, rvPost("/up")...)
		c.data(1, false, []byte("x")) // then nothing
		resps, _ := c.collect(4*time.Second, nil, ended(1))
		t.Logf("%s: %s", srvName, resps[1].body)
		if srvName == "edge" && !strings.Contains(string(resps[1].body), "timeout") {
			t.Errorf("edge: the read deadline is not supported")
		}
	}
}
