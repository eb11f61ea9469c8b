package e2e

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"
)

// Transcript reads the answers to a raw exchange on c, the i-th read as
// the answer to methods[i] (GET past their end), at most max of them (0:
// until the connection ends or goes quiet), each awaited up to wait. It
// returns each answer as the answer function renders it, then how the
// connection ended: "open" (nothing more within wait; "partial(N)" before
// it when N bytes of an unfinished answer came), "EOF" (closed or reset)
// or "ERR …" (bytes that are not an answer), joined by " | ". The
// differential tests compare such transcripts between the hit path and
// net/http alone, so both sides must be read the same way: hence one
// reader.
func Transcript(c net.Conn, methods []string, max int, wait time.Duration, answer func(resp *http.Response, body []byte, bodyErr error) string) string {
	return TranscriptWith(c, Reading{Methods: methods, Max: max, First: wait, Wait: wait}, answer)
}

// Reading says how TranscriptWith reads an exchange.
type Reading struct {
	Methods []string // the i-th answer is to Methods[i] (GET past their end)
	Max     int      // answers read at most (0: until the connection ends or goes quiet)
	// First is how long the first answer is awaited, Wait each later one:
	// a server reading a slow exchange (a byte per TLS record, under -race
	// on a loaded machine) may answer long after the last byte went out,
	// where the answers after the first come together.
	First, Wait time.Duration
	// OnQuiet, if set, runs the first time the connection goes quiet with
	// no answer begun (a client's half-close once it has every answer),
	// and the reading goes on.
	OnQuiet func()
}

// TranscriptWith is Transcript as rd says.
func TranscriptWith(c net.Conn, rd Reading, answer func(resp *http.Response, body []byte, bodyErr error) string) string {
	counted := &countingConn{Conn: c}
	br := bufio.NewReader(counted)
	var out []string
	for i := 0; rd.Max == 0 || i < rd.Max; i++ {
		quiet := br.Buffered() == 0
		before := counted.n
		m := "GET"
		if i < len(rd.Methods) {
			m = rd.Methods[i]
		}
		d := rd.Wait
		if i == 0 {
			d = rd.First
		}
		_ = c.SetReadDeadline(time.Now().Add(d))
		resp, err := http.ReadResponse(br, &http.Request{Method: m})
		if err != nil {
			var ne net.Error
			switch {
			case errors.As(err, &ne) && ne.Timeout() && quiet && counted.n == before && rd.OnQuiet != nil:
				// Nothing of an answer was read (a read that timed out
				// leaves a TLS connection usable): go on after OnQuiet.
				rd.OnQuiet()
				rd.OnQuiet = nil
				i--
				continue
			case errors.As(err, &ne) && ne.Timeout():
				if br.Buffered() > 0 {
					out = append(out, fmt.Sprintf("partial(%d)", br.Buffered()))
				}
				out = append(out, "open")
			case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || strings.Contains(err.Error(), "reset"):
				out = append(out, "EOF")
			default:
				out = append(out, "ERR "+err.Error())
			}
			break
		}
		b, berr := io.ReadAll(resp.Body)
		resp.Body.Close()
		out = append(out, answer(resp, b, berr))
	}
	return strings.Join(out, " | ")
}

// countingConn counts the bytes read from a connection.
type countingConn struct {
	net.Conn
	n int64
}

func (c *countingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.n += int64(n)
	return n, err
}
