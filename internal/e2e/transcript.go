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
	br := bufio.NewReader(c)
	var out []string
	for i := 0; max == 0 || i < max; i++ {
		m := "GET"
		if i < len(methods) {
			m = methods[i]
		}
		_ = c.SetReadDeadline(time.Now().Add(wait))
		resp, err := http.ReadResponse(br, &http.Request{Method: m})
		if err != nil {
			var ne net.Error
			switch {
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
