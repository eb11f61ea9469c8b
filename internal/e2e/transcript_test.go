package e2e

import (
	"io"
	"net"
	"net/http"
	"testing"
	"time"
)

// TestOnQuietRunsOnceAndHidesNoAnswer: OnQuiet runs once, when the
// connection has been quiet for the wait with nothing of an answer read
// (here before the first: "quiet", not "every answer is in", which is why
// the close_notify differential waits 5 s for a first answer), the reading
// goes on, and a later answer cut short still shows as cut.
func TestOnQuietRunsOnceAndHidesNoAnswer(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		time.Sleep(300 * time.Millisecond) // slower than First
		_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
		time.Sleep(300 * time.Millisecond)
		_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nse") // cut answer
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var fired []time.Duration
	start := time.Now()
	got := TranscriptWith(c, Reading{Max: 5, First: 200 * time.Millisecond, Wait: 500 * time.Millisecond,
		OnQuiet: func() { fired = append(fired, time.Since(start)) }},
		func(resp *http.Response, b []byte, berr error) string {
			s := resp.Status + " " + string(b)
			if berr != nil {
				s += " (cut)"
			}
			return s
		})
	t.Logf("OnQuiet at %v; transcript %q", fired, got)
	if len(fired) != 1 || fired[0] > 500*time.Millisecond {
		t.Errorf("OnQuiet %v", fired)
	}
	if got != "200 OK ok | 200 OK se (cut) | EOF" && got != "200 OK ok | 200 OK se (cut) | open" {
		t.Errorf("transcript %q", got)
	}
}
