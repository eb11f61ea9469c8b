package node

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"
)

// Claim held: the guesses bound is checked (adminGuesses.throttled), the
// token compared, then charged (adminGuesses.wrong), with nothing
// reserved between: a check-then-act. Attack tried: 60 keep-alive
// connections from one address (the admin listener allows 64) each write
// a wrong-token POST /purge at once, six volleys a second apart, also
// with -cpu 16. Observed: 10 compared in the first volley, then exactly
// one a second; the window between check and charge is too short to be
// hit from the network here (2 CPUs). Asserted: no more compared than
// the burst plus one a second.
func TestS30AdminConcurrentWrongTokensStayBounded(t *testing.T) {
	adm := freeAddr(t)
	startNodeYAML(t, "listen: '"+freeAddr(t)+"'\nadmin: {listen: '"+adm+"', token: 'admin-token-0123456789'}\norigin: {url: 'http://127.0.0.1:1'}\n")
	const conns = 60
	type cr struct {
		c net.Conn
		r *bufio.Reader
	}
	cs := make([]cr, conns)
	for i := range cs {
		c, err := net.Dial("tcp", adm)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(30 * time.Second))
		cs[i] = cr{c, bufio.NewReader(c)}
	}
	volley := func(round int) (compared, throttled int) {
		var mu sync.Mutex
		var start, wg sync.WaitGroup
		start.Add(1)
		for i := range cs {
			wg.Add(1)
			go func(i int) {
				defer wg.Done()
				req := fmt.Sprintf("POST /purge?tag=t HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer guess-%d-%d\r\nContent-Length: 0\r\n\r\n", round, i)
				start.Wait()
				if _, err := io.WriteString(cs[i].c, req); err != nil {
					t.Error(err)
					return
				}
				resp, err := http.ReadResponse(cs[i].r, nil)
				if err != nil {
					t.Error(err)
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				mu.Lock()
				defer mu.Unlock()
				switch resp.StatusCode {
				case http.StatusUnauthorized:
					compared++
				case http.StatusTooManyRequests:
					throttled++
				}
			}(i)
		}
		start.Done()
		wg.Wait()
		return
	}
	began := time.Now()
	total := 0
	const rounds = 3
	for round := range rounds {
		if round > 0 {
			time.Sleep(time.Second)
		}
		c, th := volley(round)
		t.Logf("volley %d: %d compared (401), %d throttled (429)", round, c, th)
		total += c
	}
	allowed := guessBurst + int(time.Since(began).Seconds()) + 1
	if total > allowed {
		t.Errorf("%d wrong tokens compared from one address in %v, the bound allows %d: concurrent guesses pass the check before any is charged", total, time.Since(began).Round(time.Millisecond), allowed)
	}
}
