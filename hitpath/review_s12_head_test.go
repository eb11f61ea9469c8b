package hitpath

// Review s12: the first head's deadline (accepted + read_header_timeout)
// must not reach later heads.

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"testing"
	"time"
)

const s12RHT = 400 * time.Millisecond

func s12HeadConn(t *testing.T) (net.Conn, *bufio.Reader) {
	t.Helper()
	_, addr, _ := startLoop(t, Config{ReadHeaderTimeout: s12RHT, IdleTimeout: 10 * time.Second, WriteTimeout: 5 * time.Second})
	return dial(t, addr)
}

// A keep-alive connection whose first request net/http answered: a later
// head, begun well after accepted+RHT and trickled within RHT, is served.
func TestS12LaterHeadAfterHandedFirst(t *testing.T) {
	t.Parallel() // timers and sockets: they wait, side by side
	c, br := s12HeadConn(t)
	_, _ = io.WriteString(c, get("/miss"))
	expect(t, br, "GET", "net/http", "net:/miss")
	time.Sleep(2 * s12RHT)
	_, _ = io.WriteString(c, "GET /hit HTTP/1.1\r\nHo")
	time.Sleep(s12RHT / 2)
	_, _ = io.WriteString(c, "st: h\r\n\r\n")
	expect(t, br, "GET", "fast", "hit")
}

// The same after an HTTP/1.0 keep-alive request.
func TestS12LaterHeadAfterHTTP10First(t *testing.T) {
	t.Parallel() // timers and sockets: they wait, side by side
	c, br := s12HeadConn(t)
	_, _ = io.WriteString(c, "GET /hit HTTP/1.0\r\nHost: h\r\nConnection: keep-alive\r\n\r\n")
	resp, err := readResp(br)
	if err != nil {
		t.Fatal(err)
	}
	if resp != "hit" && resp != "net:/hit" {
		t.Fatalf("first answer %q", resp)
	}
	time.Sleep(2 * s12RHT)
	_, _ = io.WriteString(c, "GET /hit HTTP/1.1\r\nHo")
	time.Sleep(s12RHT / 2)
	_, _ = io.WriteString(c, "st: h\r\n\r\n")
	if got, err := readResp(br); err != nil || (got != "hit" && got != "net:/hit") {
		t.Fatalf("second answer %q, %v", got, err)
	}
}

// A pipelined second head, partial behind a hit sent late in the first
// head's window, completes after accepted+RHT but within RHT of its own
// first bytes.
func TestS12PipelinedSecondHeadDeadline(t *testing.T) {
	t.Parallel() // timers and sockets: they wait, side by side
	c, br := s12HeadConn(t)
	time.Sleep(s12RHT * 3 / 4)
	_, _ = io.WriteString(c, get("/hit")+"GET /hit HTTP/1.1\r\nHo")
	expect(t, br, "GET", "fast", "hit")
	time.Sleep(s12RHT / 2) // past accepted+RHT
	_, _ = io.WriteString(c, "st: h\r\n\r\n")
	expect(t, br, "GET", "fast", "hit")
}

// The first head trickled: served inside accepted+RHT, cut after it.
func TestS12FirstHeadTrickle(t *testing.T) {
	t.Parallel() // timers and sockets: they wait, side by side
	c, br := s12HeadConn(t)
	_, _ = io.WriteString(c, "GET /hit HTTP/1.1\r\nHo")
	time.Sleep(s12RHT / 2)
	_, _ = io.WriteString(c, "st: h\r\n\r\n")
	expect(t, br, "GET", "fast", "hit")

	c2, br2 := s12HeadConn(t)
	time.Sleep(s12RHT * 3 / 4)
	_, _ = io.WriteString(c2, "GET /hit HTTP/1.1\r\nHo")
	time.Sleep(s12RHT / 2)
	_, _ = io.WriteString(c2, "st: h\r\n\r\n")
	_ = c2.SetReadDeadline(time.Now().Add(2 * time.Second))
	// Cut: no answer, or net/http's 400 for the part it read (as net/http
	// alone answers, TestS12ForeignFirstHeadTrickleDiff), never the hit.
	if got, err := readResp(br2); err == nil && got != "400 Bad Request" {
		t.Fatalf("a first head whole after accepted+RHT was answered: %q", got)
	}
}

func readResp(br *bufio.Reader) (string, error) {
	resp, err := httpReadResponse(br)
	if err != nil {
		return "", err
	}
	return resp, nil
}

func httpReadResponse(br *bufio.Reader) (string, error) {
	resp, err := http.ReadResponse(br, &http.Request{Method: "GET"})
	if err != nil {
		return "", err
	}
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

// TestS12ForeignFirstHeadTrickleDiff: the same as net/http alone (same
// read_header_timeout on both). Its timeout is twice the other tests': the
// two servers run one after the other, and a margin of a quarter of 400 ms
// on either side of the deadline was crossed once on a loaded machine (the
// loop's run cut where net/http's, later, did not, or the reverse).
func TestS12ForeignFirstHeadTrickleDiff(t *testing.T) {
	t.Parallel() // timers and sockets: they wait, side by side
	const rht = 2 * s12RHT
	run := func(withLoop bool, first string) string {
		addr := reviewServer(t, withLoop, Config{ReadHeaderTimeout: rht, IdleTimeout: 10 * time.Second}, rht)
		c, br := dial(t, addr)
		time.Sleep(rht * 3 / 4)
		_, _ = io.WriteString(c, first)
		time.Sleep(rht / 2)
		_, _ = io.WriteString(c, "st: h\r\nContent-Length: 1\r\n\r\nx")
		_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
		got, err := readResp(br)
		if err != nil {
			return "error"
		}
		return got
	}
	for _, first := range []string{"POST /p HTTP/1.1\r\nHo", "POST /p HTTP/1.1\r\n", "GET /miss HTTP/1.1\r\nHo", "GET /hit HTTP/1.0\r\nHo"} {
		a, b := run(true, first), run(false, first)
		if a != b {
			t.Errorf("%q: with the loop %q, net/http alone %q", first, a, b)
		}
	}
}
