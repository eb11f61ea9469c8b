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

// TestAnswersWithoutTheBodyEndThePublicConnection: on the public listener,
// answers given before the proxy reads a body (a host no site serves, a
// host that is not one, a rate limit) end a connection whose declared body
// never comes, once they are out; before, such a connection was held for
// good (idle_timeout does not apply to a request under way) and counted
// against limits.max_connections.
func TestAnswersWithoutTheBodyEndThePublicConnection(t *testing.T) {
	o := s16Origin(t)
	n := startNodeYAML(t, "node_id: a\nlisten: '"+freeAddr(t)+"'\nadmin: {listen: '"+freeAddr(t)+"'}\nsites:\n  - name: shop\n    hosts: [shop.test]\n    origins: ['"+o.URL+"']\n    rate_limit: {rate: 1, burst: 1}\n")
	for _, c := range []struct{ head, status string }{
		{"GET /x HTTP/1.1\r\nHost: nosuch.test\r\nContent-Length: 1\r\n\r\n", "421"},
		{"GET /x HTTP/1.1\r\nHost: a:b:c\r\nContent-Length: 1\r\n\r\n", "400"},
		{"GET /x HTTP/1.1\r\nHost: shop.test\r\nContent-Length: 1\r\n\r\n", "200"}, // the proxy drops it
		{"POST /x HTTP/1.1\r\nHost: shop.test\r\nContent-Length: 10\r\n\r\n", "429"},
		{"POST /x HTTP/1.1\r\nHost: nosuch.test\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n", "421"},
	} {
		conn, err := net.Dial("tcp", n.PublicAddr())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.WriteString(conn, c.head); err != nil {
			t.Fatal(err)
		}
		_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		b, err := io.ReadAll(conn)
		conn.Close()
		if err != nil || !strings.HasPrefix(string(b), "HTTP/1.1 "+c.status) {
			t.Errorf("%.40q: read %.30q, %v; want %s and the connection closed", c.head, b, err, c.status)
		}
	}
	if got := s16WaitOpen(n.conns, 0, 3*time.Second); got != 0 {
		t.Errorf("client connections open %d after every answer", got)
	}
}
