package proxy

// Hostile review s37 of closingWriter (8236ca7) and the handler's request
// copy (c67e044).

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// s37EchoOrigin reads the whole body and answers its length.
func s37EchoOrigin(t testing.TB) *httptest.Server {
	o := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := io.Copy(io.Discard, r.Body)
		w.Header().Set("Cache-Control", "no-store")
		fmt.Fprintf(w, "%s %d", r.Method, n)
	}))
	t.Cleanup(o.Close)
	return o
}

// TestS37SequentialUploadsReuseTheConnection: uploads the edge reads to the
// end must not close keep-alive connections (50 sequential POSTs per size, 15 of 1 MiB,
// on one connection, buffering on and off, plain and TLS).
func TestS37SequentialUploadsReuseTheConnection(t *testing.T) {
	o := s37EchoOrigin(t)
	for _, mode := range []string{"buffered", "streamed", "nospool-chunked"} {
		buffering := mode != "streamed"
		chunked := mode == "nospool-chunked"
		for _, useTLS := range []bool{false, true} {
			h := proxyFor(t, o.URL, func(c *Config) {
				c.RequestBuffering = buffering
				if chunked {
					c.SpoolBytes, c.SpoolDir = 0, "" // past 64 KiB the body goes on as it comes
				}
			})
			ts := httptest.NewUnstartedServer(h)
			var conns atomic.Int64
			ts.Config.ConnState = func(_ net.Conn, s http.ConnState) {
				if s == http.StateNew {
					conns.Add(1)
				}
			}
			if useTLS {
				ts.EnableHTTP2 = false
				ts.StartTLS()
			} else {
				ts.Start()
			}
			tr := &http.Transport{MaxIdleConnsPerHost: 1, MaxConnsPerHost: 1, TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}
			client := &http.Client{Transport: tr, Timeout: 10 * time.Second}
			for _, size := range []int{1 << 10, 100 << 10, 1 << 20} {
				body := bytes.Repeat([]byte("x"), size)
				n := 50
				if size == 1<<20 {
					n = 15 // keeps the test short; one needless close is enough
				}
				var closes, notReused int
				for i := range n {
					var reused bool
					trace := &httptrace.ClientTrace{GotConn: func(ci httptrace.GotConnInfo) { reused = ci.Reused }}
					var rd io.Reader = bytes.NewReader(body)
					if chunked {
						rd = io.MultiReader(rd) // no length: sent chunked
					}
					req, _ := http.NewRequestWithContext(httptrace.WithClientTrace(context.Background(), trace), "POST", ts.URL+"/up", rd)
					resp, err := client.Do(req)
					if err != nil {
						t.Fatalf("%s tls %v size %d #%d: %v", mode, useTLS, size, i, err)
					}
					b, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					if want := fmt.Sprintf("POST %d", size); string(b) != want {
						t.Fatalf("%s tls %v size %d #%d: got %d %q want %q", mode, useTLS, size, i, resp.StatusCode, b, want)
					}
					if resp.Close || resp.Header.Get("Connection") != "" {
						closes++
					}
					if i > 0 && !reused {
						notReused++
					}
				}
				if closes > 0 || notReused > 0 {
					t.Errorf("%s tls %v size %d: %d of %d answers said Connection: close, %d requests on a new connection", mode, useTLS, size, closes, n, notReused)
				}
			}
			if c := conns.Load(); c != 1 {
				t.Errorf("%s tls %v: %d connections for sequential uploads, want 1", mode, useTLS, c)
			}
			tr.CloseIdleConnections()
			ts.Close()
			if h.spool != nil {
				expectNothingHeld(t, h, "uploads")
			} else if h.Wait(); h.upstream.inFlight() != 0 || h.buffered.Load() != 0 || h.uploadMem.Load() != 0 {
				t.Errorf("%s: left held: %d slots, %d buffered, %d upload memory", mode, h.upstream.inFlight(), h.buffered.Load(), h.uploadMem.Load())
			}
		}
	}
}

// TestS37StreamedAnswerToPOSTIsFlushed: an origin's answer to a POST that
// streams (its first part while the rest is made) reaches the client as it
// comes through closingWriter: the first chunk arrives while the origin is
// still holding the rest.
func TestS37StreamedAnswerToPOSTIsFlushed(t *testing.T) {
	var gates sync.Map // path → chan struct{}
	o := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Cache-Control", "no-store")
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, "first\n")
		w.(http.Flusher).Flush()
		g, _ := gates.Load(r.URL.Path)
		select {
		case <-g.(chan struct{}):
		case <-r.Context().Done():
		}
		_, _ = io.WriteString(w, "second\n")
	}))
	t.Cleanup(o.Close)
	for _, method := range []string{"POST", "PUT", "GET-with-body"} {
		gate := make(chan struct{})
		gates.Store("/s-"+method, gate)
		h := proxyFor(t, o.URL, nil)
		ts := httptest.NewServer(h)
		m := method
		if m == "GET-with-body" {
			m = "GET"
		}
		c, err := net.Dial("tcp", ts.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		_ = c.SetDeadline(time.Now().Add(3 * time.Second))
		fmt.Fprintf(c, "%s /s-%s HTTP/1.1\r\nHost: example.com\r\nContent-Length: 5\r\n\r\nhello", m, method)
		br := bufio.NewReader(c)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("%s: %v", method, err)
		}
		line, err := bufio.NewReader(resp.Body).ReadString('\n')
		if err != nil || line != "first\n" {
			t.Errorf("%s: first chunk not flushed while the origin holds the rest: %q %v", method, line, err)
		}
		close(gate)
		c.Close()
		ts.Close()
		expectNothingHeld(t, h, method)
	}
}

// TestS37HTTP2UploadAnswersHaveNoConnectionField: over HTTP/2, a request
// whose body the edge does not read (a GET with a body, an origin's early
// answer) must get no Connection field, and Go's HTTP/2 server takes a
// Connection: close as a reason to shut the whole connection down
// gracefully: the next request must go on the same connection.
func TestS37HTTP2UploadAnswersHaveNoConnectionField(t *testing.T) {
	o := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-store")
		if strings.HasPrefix(r.URL.Path, "/early") {
			w.WriteHeader(http.StatusForbidden) // answered without reading
			return
		}
		_, _ = io.Copy(io.Discard, r.Body)
		_, _ = io.WriteString(w, "ok")
	}))
	t.Cleanup(o.Close)
	h := proxyFor(t, o.URL, func(c *Config) { c.RequestBuffering = false })
	ts := httptest.NewUnstartedServer(h)
	var conns atomic.Int64
	ts.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	ts.EnableHTTP2 = true
	ts.StartTLS()
	t.Cleanup(ts.Close)
	client := ts.Client()
	client.Timeout = 5 * time.Second
	for i, tc := range []struct{ method, path string }{
		{"GET", "/get-with-body"}, {"POST", "/early"}, {"POST", "/read"}, {"GET", "/get-with-body2"},
	} {
		pr, pw := io.Pipe()
		go func() {
			_, _ = pw.Write(bytes.Repeat([]byte("y"), 1000))
			// the rest never comes in time for the early answer; ended later
			time.AfterFunc(300*time.Millisecond, func() { pw.Close() })
		}()
		var body io.Reader = pr
		if tc.path == "/read" {
			body = strings.NewReader("all of it")
		}
		req, _ := http.NewRequest(tc.method, ts.URL+tc.path+fmt.Sprint(i), body)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", tc.method, tc.path, err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.ProtoMajor != 2 {
			t.Fatalf("not HTTP/2: %s", resp.Proto)
		}
		if v, ok := resp.Header["Connection"]; ok {
			t.Errorf("%s %s over HTTP/2: Connection %q", tc.method, tc.path, v)
		}
	}
	if c := conns.Load(); c != 1 {
		t.Errorf("%d HTTP/2 connections for 4 requests: one was shut down", c)
	}
}

// TestS37ClosingWriterKeepsWhatAWriterOffers: through the wrapper,
// ResponseController reaches flush and deadlines; 1xx passes through and
// does not count as the answer; Write before WriteHeader still sets the
// field when the body was dropped, and not when it was read.
func TestS37ClosingWriterKeepsWhatAWriterOffers(t *testing.T) {
	for _, dropped := range []bool{false, true} {
		var got []string
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			sb := &slowBody{ReadCloser: r.Body}
			sb.dropped.Store(dropped)
			cw := &headerHook{ResponseWriter: w, hook: closeIfDropped(sb)}
			rc := http.NewResponseController(cw)
			if err := rc.SetWriteDeadline(time.Now().Add(time.Second)); err != nil {
				got = append(got, "SetWriteDeadline: "+err.Error())
			}
			if err := rc.SetReadDeadline(time.Time{}); err != nil {
				got = append(got, "SetReadDeadline: "+err.Error())
			}
			cw.Header().Set("Link", "</a.css>; rel=preload")
			cw.WriteHeader(http.StatusEarlyHints)
			_, _ = io.WriteString(cw, "body")
			if err := rc.Flush(); err != nil {
				got = append(got, "Flush: "+err.Error())
			}
		}))
		c, err := net.Dial("tcp", srv.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		_ = c.SetDeadline(time.Now().Add(3 * time.Second))
		io.WriteString(c, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nhi")
		br := bufio.NewReader(c)
		var codes []int
		var final *http.Response
		for {
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatal(err)
			}
			codes = append(codes, resp.StatusCode)
			if resp.StatusCode >= 200 {
				final = resp
				break
			}
		}
		c.Close()
		srv.Close()
		if len(got) > 0 {
			t.Errorf("dropped %v: %v", dropped, got)
		}
		if len(codes) != 2 || codes[0] != 103 || codes[1] != 200 {
			t.Errorf("dropped %v: statuses %v, want [103 200]", dropped, codes)
		}
		if final.Close != dropped {
			t.Errorf("dropped %v: answer's Close %v", dropped, final.Close)
		}
	}
}
