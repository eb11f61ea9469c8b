package hitpath

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"testing"
	"time"
)

// reviewServer serves l (or a plain listener when l is nil) with a handler
// that, for /slow, waits 300 ms unless its context ends first and says which.
func reviewServer(t *testing.T, withLoop bool, cfg Config, srvHeaderTimeout time.Duration) string {
	t.Helper()
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Path", "net/http")
		if r.URL.Path == "/slow" {
			select {
			case <-time.After(300 * time.Millisecond):
				_, _ = io.WriteString(w, "ctx-ok")
			case <-r.Context().Done():
				_, _ = io.WriteString(w, "ctx-cancelled")
			}
			return
		}
		_, _ = io.WriteString(w, "net:"+r.URL.Path)
	}), ReadHeaderTimeout: srvHeaderTimeout, IdleTimeout: cfg.IdleTimeout}
	return serveWithOrWithoutLoop(t, srv, withLoop, cfg)
}

// serveWithOrWithoutLoop serves srv on a new loopback listener, through
// the loop when withLoop (with cfg), until the test ends.
func serveWithOrWithoutLoop(t *testing.T, srv *http.Server, withLoop bool, cfg Config) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if withLoop {
		l := NewListener(ln, cfg, cacheOfOne{}, nil)
		go func() { _ = l.Serve(srv) }()
	} else {
		go func() { _ = srv.Serve(ln) }()
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	})
	return ln.Addr().String()
}

// TestPipelinedHalfCloseCancelsHandedRequest: a client pipelines a
// request net/http must serve and a hit, then half-closes (shutdown(SHUT_WR),
// as `nc -N` or a one-shot pipelining client does). net/http's background
// read stops at the first pipelined byte, so the handler's context stays
// alive; the loop's hold() keeps reading, sees EOF and returns it to
// backgroundRead, which cancels the in-flight handler's context.
func TestPipelinedHalfCloseCancelsHandedRequest(t *testing.T) {
	for _, withLoop := range []bool{false, true} {
		name := "net/http alone"
		if withLoop {
			name = "with the hit path"
		}
		t.Run(name, func(t *testing.T) {
			addr := reviewServer(t, withLoop, Config{}, 5*time.Second)
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(10 * time.Second))
			if _, err := io.WriteString(c, get("/slow")); err != nil {
				t.Fatal(err)
			}
			// The next request comes while the handler runs (net/http's
			// background read is waiting), then the client half-closes.
			time.Sleep(50 * time.Millisecond)
			if _, err := io.WriteString(c, get("/hit")); err != nil {
				t.Fatal(err)
			}
			time.Sleep(20 * time.Millisecond)
			_ = c.(*net.TCPConn).CloseWrite()
			br := bufio.NewReader(c)
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			if string(b) != "ctx-ok" {
				t.Errorf("first response %q: the handed request's context was cancelled by the pipelined request + FIN", b)
			}
			if _, err := http.ReadResponse(br, nil); err != nil {
				t.Errorf("second response: %v", err)
			}
		})
	}
}

// TestSlowForeignHeadAfterHitIsCut: after a hit the loop leaves the
// idle deadline on the socket. A head the loop passes to net/http before it
// is complete (HTTP/1.0, another method, a framing field) is then read by
// net/http under that idle deadline: limits.read_header_timeout no longer
// bounds it (net/http alone resets it once the first byte arrives).
func TestSlowForeignHeadAfterHitIsCut(t *testing.T) {
	for _, withLoop := range []bool{false, true} {
		name := "net/http alone"
		if withLoop {
			name = "with the hit path"
		}
		t.Run(name, func(t *testing.T) {
			addr := reviewServer(t, withLoop, Config{ReadHeaderTimeout: 200 * time.Millisecond, IdleTimeout: time.Hour}, 200*time.Millisecond)
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			br := bufio.NewReader(c)
			_ = c.SetDeadline(time.Now().Add(30 * time.Second))
			first := get("/hit")
			if !withLoop {
				first = get("/other")
			}
			if _, err := io.WriteString(c, first); err != nil {
				t.Fatal(err)
			}
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatal(err)
			}
			_, _ = io.ReadAll(resp.Body)
			if _, err := io.WriteString(c, "GET /hit HTTP/1.0\r\nHo"); err != nil {
				t.Fatal(err)
			}
			for range 30 {
				time.Sleep(100 * time.Millisecond)
				if _, err := io.WriteString(c, "o"); err != nil {
					return // cut
				}
			}
			_ = c.SetReadDeadline(time.Now().Add(time.Second))
			if _, err := br.ReadByte(); err == nil || !isTimeout(err) {
				return // closed by the server
			}
			t.Fatal("a head trickling in for 3 s after a hit was still being read (read_header_timeout 200 ms)")
		})
	}
}

func isTimeout(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}
