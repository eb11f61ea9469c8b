package node

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"time"
)

// answerTranscript reads the answers to a raw exchange on c from br, the
// i-th read as the answer to methods[i] (GET past their end), at most max
// of them, each awaited up to wait. It returns each answer as the answer
// function renders it, then how the connection ended: "open" (nothing more
// within wait), "EOF" (closed or reset) or "ERR …" (bytes that are not an
// answer), all joined by " | ". The differential reviews compare these
// transcripts between the hit path and net/http alone.
func answerTranscript(c net.Conn, br *bufio.Reader, methods []string, max int, wait time.Duration, answer func(resp *http.Response, body []byte, bodyErr error) string) string {
	var out []string
	for i := 0; i < max; i++ {
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
