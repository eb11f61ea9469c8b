package hitpath

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// hijackServer serves /hijack by taking the connection over (as a
// WebSocket-style or CONNECT-style handler reached by a plain GET does):
// it answers the head, then echoes one line the client sends afterwards.
func hijackServer(t *testing.T, withLoop bool) string {
	t.Helper()
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/hijack" {
			_, _ = io.WriteString(w, "net:"+r.URL.Path)
			return
		}
		c, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Errorf("hijack: %v", err)
			return
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(20 * time.Second))
		_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
		line, err := brw.ReadString('\n')
		if err != nil {
			_, _ = io.WriteString(c, "read error: "+err.Error()+"\n")
			return
		}
		_, _ = io.WriteString(c, "echo: "+line)
	}), ReadHeaderTimeout: 5 * time.Second}
	return serveWithOrWithoutLoop(t, srv, withLoop, Config{})
}

// TestHijackedConnectionReadsGoToHold: a bodyless GET the loop hands
// to net/http is hijacked by its handler. The connection stays in
// stateHanded (ConnState's StateHijacked does not end it), so every Read of
// the hijacker goes to hold(), which buffers the client's bytes for a loop
// that never runs again and returns nothing: the hijacked connection is
// deaf (here until the handler's own 20 s deadline; without one, for ever,
// a goroutine and a connection leaked per request). Bytes the client
// pipelined right behind the head are lost the same way.
func TestHijackedConnectionReadsGoToHold(t *testing.T) {
	for _, tc := range []struct {
		name      string
		withLoop  bool
		pipelined bool
	}{
		{"net/http alone", false, false},
		{"with the hit path", true, false},
		{"with the hit path, line pipelined behind the head", true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addr := hijackServer(t, tc.withLoop)
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(10 * time.Second))
			br := bufio.NewReader(c)
			req := get("/hijack")
			if tc.pipelined {
				req += "ping\n"
			}
			if _, err := io.WriteString(c, req); err != nil {
				t.Fatal(err)
			}
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if !tc.pipelined {
				if _, err := io.WriteString(c, "ping\n"); err != nil {
					t.Fatal(err)
				}
			}
			line, err := br.ReadString('\n')
			if err != nil {
				t.Fatalf("no echo from the hijacked connection (hang): %v", err)
			}
			if strings.TrimSpace(line) != "echo: ping" {
				t.Fatalf("got %q", line)
			}
		})
	}
}

// TestReadTimeoutIsRefused: net/http starts ReadTimeout's clock when
// it begins waiting for a request, so the hits the loop answers meanwhile
// would count against the next request's body (the review's test lost a
// POST body after 1.5 s of hits and idleness). The listener does not
// support it: Serve refuses such a server.
func TestReadTimeoutIsRefused(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	l := NewListener(ln, Config{}, cacheOfOne{}, nil)
	err = l.Serve(&http.Server{ReadTimeout: time.Second})
	if err == nil || !strings.Contains(err.Error(), "ReadTimeout") {
		t.Fatalf("Serve with a ReadTimeout: %v", err)
	}
}
