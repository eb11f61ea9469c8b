package origin

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func newClient(t *testing.T, url string) *Client {
	t.Helper()
	c, err := NewClient(ClientConfig{URL: url, ConnectTimeout: time.Second, ResponseTimeout: 300 * time.Millisecond, MaxIdleConns: 4, IdleConnTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestNewClientRejectsBadURLs(t *testing.T) {
	for _, u := range []string{"", "ftp://x", "127.0.0.1:80", "http://", "::"} {
		if _, err := NewClient(ClientConfig{URL: u}); err == nil {
			t.Errorf("accepted %q", u)
		}
	}
}

func TestClientJoinsBasePathAndQuery(t *testing.T) {
	var got string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { got = r.URL.RequestURI() + " " + r.Host }))
	defer srv.Close()
	c := newClient(t, srv.URL+"/base/")
	req := httptest.NewRequest("GET", "http://client.example/a/b?x=1", nil)
	resp, err := c.Fetch(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if want := "/base/a/b?x=1 " + strings.TrimPrefix(srv.URL, "http://"); got != want {
		t.Errorf("origin saw %q, want %q", got, want)
	}
}

// TestClientRetriesIdempotentOnce: the first connection is reset before any
// response; a GET is retried once and succeeds, a POST is not retried.
func TestClientRetriesIdempotentOnce(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var accepted atomic.Int64
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			if accepted.Add(1)%2 == 1 {
				// Odd connections: read the request and reset without answering.
				_, _ = c.Read(make([]byte, 4096))
				if tc, ok := c.(*net.TCPConn); ok {
					_ = tc.SetLinger(0)
				}
				c.Close()
				continue
			}
			go http.Serve(&oneConnListener{c: c}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "ok") }))
		}
	}()
	defer ln.Close()
	c := newClient(t, "http://"+ln.Addr().String())
	resp, err := c.Fetch(context.Background(), httptest.NewRequest("GET", "http://x/", nil))
	if err != nil {
		t.Fatalf("GET not retried: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(b) != "ok" || accepted.Load() != 2 {
		t.Errorf("body %q after %d connections", b, accepted.Load())
	}
	c.CloseIdle()
	post := httptest.NewRequest("POST", "http://x/", strings.NewReader("data"))
	if _, err := c.Fetch(context.Background(), post); err == nil {
		t.Error("POST to a resetting origin succeeded: it must not be retried")
	}
}

type oneConnListener struct {
	c    net.Conn
	done bool
}

func (l *oneConnListener) Accept() (net.Conn, error) {
	if l.done {
		select {} // serve the one connection only
	}
	l.done = true
	return l.c, nil
}
func (l *oneConnListener) Close() error   { return nil }
func (l *oneConnListener) Addr() net.Addr { return l.c.LocalAddr() }

func TestClientResponseTimeout(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-time.After(2 * time.Second):
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	c := newClient(t, srv.URL)
	_, err := c.Fetch(context.Background(), httptest.NewRequest("GET", "http://x/", nil))
	var ne net.Error
	if err == nil || !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("err = %v, want a timeout", err)
	}
}

func TestStalledBodyFails(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "100")
		_, _ = w.Write([]byte("partial"))
		w.(http.Flusher).Flush()
		<-release
	}))
	defer srv.Close()
	defer close(release)
	c, err := NewClient(ClientConfig{URL: srv.URL, ConnectTimeout: time.Second, ResponseTimeout: 200 * time.Millisecond, MaxIdleConns: 1, IdleConnTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := c.Fetch(context.Background(), httptest.NewRequest("GET", "http://x/", nil))
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err = io.ReadAll(resp.Body)
	resp.Body.Close()
	if !errors.Is(err, ErrBodyStalled) {
		t.Fatalf("read error %v, want ErrBodyStalled", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("stall detected after %s", d)
	}
}
