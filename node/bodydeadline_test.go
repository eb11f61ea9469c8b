package node

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestWithBodyDeadline: a body that stops coming fails the handler's read
// at the deadline; a body that came in time leaves no deadline behind (an
// answer written long after it is whole); with no deadline (0) a body the
// handler leaves unread still ends the connection once the answer is out.
func TestWithBodyDeadline(t *testing.T) {
	readErr := make(chan error, 1)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/ignore" {
			_, _ = io.WriteString(w, "ignored")
			return
		}
		_, err := io.ReadAll(r.Body)
		readErr <- err
		if err == nil {
			time.Sleep(400 * time.Millisecond) // past the body's deadline
			_, _ = io.WriteString(w, "late answer")
		}
	})
	for _, c := range []struct {
		timeout time.Duration
		raw     string
		wantErr bool   // the handler's read fails
		want    string // in the answer
	}{
		{200 * time.Millisecond, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 9\r\n\r\nfour", true, ""},
		{200 * time.Millisecond, "POST / HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: 4\r\n\r\nfour", false, "late answer"},
		{0, "POST /ignore HTTP/1.1\r\nHost: x\r\nContent-Length: 9\r\n\r\nfour", false, "ignored"},
	} {
		srv := httptest.NewServer(withBodyDeadline(h, c.timeout))
		conn, err := net.Dial("tcp", srv.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.WriteString(conn, c.raw); err != nil {
			t.Fatal(err)
		}
		_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		b, err := io.ReadAll(conn)
		if err != nil {
			t.Errorf("%.30q: the connection did not end: %v (read %q)", c.raw, err, b)
		}
		if c.want != "" && !strings.Contains(string(b), c.want) {
			t.Errorf("%.30q: answer %q, want %q in it", c.raw, b, c.want)
		}
		if c.timeout > 0 {
			if err := <-readErr; (err != nil) != c.wantErr {
				t.Errorf("%.30q: the handler's read: %v, want an error %v", c.raw, err, c.wantErr)
			}
		}
		conn.Close()
		srv.Close()
	}
}
