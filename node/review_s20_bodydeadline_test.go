package node

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// The review (s20) of withBodyDeadline: its first version replaced r.Body
// on the very *http.Request net/http keeps as w.req (it is the outermost
// handler of the plain public listener, the cluster listener and the admin
// listener), and net/http's own bookkeeping of the request body looks at
// w.req.Body's concrete type (*body, *expectContinueReader): the
// expect-continue check, the "body closed early" check
// (closedRequestBodyEarly) and the "too big to discard" shortcut in
// chunkWriter.writeHeader; and it set a past read deadline on a body
// net/http had itself read and closed, which ended its background read and
// cancelled the connection's context. All three failed then; the handler
// now gets a copy of the request, and a body already closed is left to
// net/http (endUnreadBody). These tests compare a handler served bare with
// the same handler under withBodyDeadline(h, 0).

func s20Serve(t *testing.T, h http.Handler) string {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv.Listener.Addr().String()
}

// readResponse reads one response off br (any body by Content-Length).
func s20ReadResponse(t *testing.T, c net.Conn, br *bufio.Reader, req *http.Request) (*http.Response, string, error) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(3 * time.Second))
	resp, err := http.ReadResponse(br, req)
	if err != nil {
		return nil, "", err
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(b), err
}

// 1. A handler whose answer is larger than net/http's buffer and that does
// not read a small body: net/http discards the body itself when the header
// goes out (mid-handler), reaching its end, which starts the background
// read. withBodyDeadline never saw the end (ended false) and, when the
// handler returns, sets the read deadline to now: the background read fails
// with a timeout net/http did not ask for, and net/http cancels the
// CONNECTION's context; the connection is kept alive, and every later
// request on it starts with a cancelled context.
func TestS20UnreadSmallBodyCancelsTheNextRequestsContext(t *testing.T) {
	big := strings.Repeat("x", 8<<10)
	inner := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/next" {
			fmt.Fprintf(w, "ctx=%v", r.Context().Err())
			return
		}
		w.Header().Set("Content-Length", fmt.Sprint(len(big)))
		_, _ = io.WriteString(w, big) // the body (10 bytes) is not read
	})
	run := func(h http.Handler) (cancelled int) {
		addr := s20Serve(t, h)
		for range 10 {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			br := bufio.NewReader(c)
			_, _ = io.WriteString(c, "POST /first HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n0123456789")
			if _, _, err := s20ReadResponse(t, c, br, nil); err != nil {
				t.Fatalf("first answer: %v", err)
			}
			_, _ = io.WriteString(c, "GET /next HTTP/1.1\r\nHost: x\r\n\r\n")
			_, body, err := s20ReadResponse(t, c, br, nil)
			c.Close()
			if err != nil {
				t.Fatalf("second answer on the kept-alive connection: %v", err)
			}
			if body != "ctx=<nil>" {
				cancelled++
			}
		}
		return cancelled
	}
	if n := run(inner); n != 0 {
		t.Fatalf("control (bare handler): %d of 10 next requests had a cancelled context", n)
	}
	if n := run(withBodyDeadline(inner, 0)); n != 0 {
		t.Errorf("under withBodyDeadline: %d of 10 next requests on the kept-alive connection started with a cancelled context", n)
	}
	// The background read's timeout races net/http's own abort of it
	// (finishRequest, after the handler): anything between the two (here
	// 2 ms of work by a wrapper outside withBodyDeadline, as a scheduler
	// delay on a loaded machine would be) lets the timeout win.
	outer := func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			h.ServeHTTP(w, r)
			time.Sleep(2 * time.Millisecond)
		})
	}
	if n := run(outer(inner)); n != 0 {
		t.Fatalf("control (bare handler, delayed): %d of 10 next requests had a cancelled context", n)
	}
	if n := run(outer(withBodyDeadline(inner, 0))); n != 0 {
		t.Errorf("under withBodyDeadline, delayed: %d of 10 next requests on the kept-alive connection started with a cancelled context", n)
	}
}

// 2. A handler that closes a large body early (>256 KiB unread): net/http
// marks the body early-closed and closes the connection after the answer
// (closedRequestBodyEarly, and the *body case in writeHeader), so the rest
// of the body is never parsed as a request. Under withBodyDeadline both
// checks see a *deadlineBody, the connection is kept, and the unread body is
// read as the next request (a desync; the deadline withBodyDeadline sets is
// replaced by net/http's idle deadline before that read).
func TestS20EarlyClosedBodyIsNotParsedAsTheNextRequest(t *testing.T) {
	var smuggled atomic.Int32
	inner := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/smuggled" {
			smuggled.Add(1)
			_, _ = io.WriteString(w, "smuggled")
			return
		}
		_ = r.Body.Close() // e.g. a transport giving up on an upload
		_, _ = io.WriteString(w, "refused")
	})
	inner2 := inner
	run := func(h http.Handler) int32 {
		smuggled.Store(0)
		addr := s20Serve(t, h)
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		br := bufio.NewReader(c)
		inner := "GET /smuggled HTTP/1.1\r\nHost: x\r\nX-Pad: " + strings.Repeat("a", 300<<10) + "\r\n\r\n"
		go func() {
			_, _ = io.WriteString(c, fmt.Sprintf("POST /up HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n", len(inner))+inner)
		}()
		for range 2 {
			if _, _, err := s20ReadResponse(t, c, br, nil); err != nil {
				break
			}
		}
		time.Sleep(100 * time.Millisecond)
		return smuggled.Load()
	}
	if n := run(inner2); n != 0 {
		t.Fatalf("control (bare handler): the body was served as a request %d times", n)
	}
	if n := run(withBodyDeadline(inner2, 0)); n != 0 {
		t.Errorf("under withBodyDeadline: the unread rest of a request body was served as a request (%d)", n)
	}
}

// 3. Expect: 100-continue, body not read, answer larger than net/http's
// buffer: net/http closes after the answer without reading the body it
// never asked for (the *expectContinueReader check). Under withBodyDeadline
// that check is skipped and writeHeader tries to discard the body, mid-
// handler, before the deadline withBodyDeadline sets at the end: the
// answer waits for a body the client holds back until it gives up waiting
// for 100 Continue (curl: 1 s; some clients: never).
func TestS20ExpectContinueUnreadBodyDoesNotStallTheAnswer(t *testing.T) {
	big := strings.Repeat("x", 8<<10)
	inner := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", fmt.Sprint(len(big)))
		_, _ = io.WriteString(w, big)
	})
	run := func(h http.Handler) error {
		addr := s20Serve(t, h)
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		br := bufio.NewReader(c)
		_, _ = io.WriteString(c, "PUT /x HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\nExpect: 100-continue\r\n\r\n")
		_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
		_, err = http.ReadResponse(br, nil)
		return err
	}
	if err := run(inner); err != nil {
		t.Fatalf("control (bare handler): %v", err)
	}
	if err := run(withBodyDeadline(inner, 0)); err != nil {
		t.Errorf("under withBodyDeadline: no answer within 2 s to a client waiting for 100 Continue: %v", err)
	}
}
