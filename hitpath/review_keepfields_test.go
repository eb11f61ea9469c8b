package hitpath

import (
	"io"
	"net"
	"strings"
	"testing"
	"time"
)

// A request whose field lines pass maxKeptFields is handed over head only
// even when a framing field (a body) follows the 64th line: the loop's
// early return skips fieldOf, so Content-Length / Transfer-Encoding are
// never seen. It must be foreign (net/http's for good), as without
// KeepFields.
func TestReviewKeptFieldsOverflowHidesFraming(t *testing.T) {
	rules := &fieldRules{keep: true, own: []string{"cache-control", "x-forwarded-proto"}}
	for _, framing := range []string{"Content-Length: 5", "Transfer-Encoding: chunked", "Expect: 100-continue", "Upgrade: websocket", "Connection: upgrade"} {
		head := "GET /p HTTP/1.1\r\nHost: h\r\n" + strings.Repeat("X-F: 1\r\n", maxKeptFields) + framing + "\r\n\r\n"
		var r Request
		if _, res, reason := parse([]byte(head), &r, rules); res != foreign {
			t.Errorf("%s after %d fields: %v (%s), want foreign", framing, maxKeptFields, res, reason)
		}
		// Without KeepFields the same head is foreign.
		if _, res, _ := parse([]byte(head), &r, nil); res != foreign {
			t.Errorf("%s without KeepFields: %v", framing, res)
		}
	}
}

// The consequence on a real listener: a GET with a body behind 64 fields
// is handed head-only; net/http then reads the body through hold, which
// keeps the bytes for the loop and never returns them: the connection and
// its goroutine hang with no timeout (no MAC needed: anyone who reaches
// the cluster port).
func TestReviewKeptFieldsOverflowWithBodyHangs(t *testing.T) {
	_, addr, _, _ := startLoopListener(t, Config{KeepFields: true, AnswererFields: []string{"Cache-Control"}})
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	req := "GET /miss HTTP/1.1\r\nHost: h\r\n" + strings.Repeat("X-F: 1\r\n", maxKeptFields) + "Content-Length: 5\r\n\r\nhello"
	if _, err := io.WriteString(c, req); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(3 * time.Second))
	b := make([]byte, 512)
	n, err := c.Read(b)
	if err != nil {
		t.Fatalf("no answer in 3 s (%v): the handed request's body is held by the loop", err)
	}
	if !strings.Contains(string(b[:n]), "net:/misshello") {
		t.Errorf("answer %q", b[:n])
	}
}
