package node

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestS52PipelinedHitsAcrossConnectionsNeverCrossKeys: the hit path builds
// each key in a pooled buffer and reads Host and target as views of the
// connection's read buffer. Many connections at once pipeline bursts of
// hits for distinct paths under distinct host spellings (upper case, a
// trailing dot, a port), with a miss in the middle of some bursts (handed
// to net/http, the rest read on), and every answer must be the page of
// its own request; the hot-key sample, which keeps copies of keys, must
// hold only keys of real pages. Held if it passes (run with -race).
func TestS52PipelinedHitsAcrossConnectionsNeverCrossKeys(t *testing.T) {
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=600")
		body := "page " + r.URL.RequestURI() + " " + strings.Repeat(strings.TrimPrefix(r.URL.Path, "/"), 40)
		_, _ = io.WriteString(w, body)
	}))
	defer origin.Close()
	n := startNode(t, origin.URL, "tuning: {hit_path: true}\n")
	addr := n.PublicAddr()
	const pages = 24
	path := func(i int) string { return fmt.Sprintf("/p%02d?q=%d", i, i*7) }
	want := func(p string) string {
		u, _, _ := strings.Cut(p, "?")
		return "page " + p + " " + strings.Repeat(strings.TrimPrefix(u, "/"), 40)
	}
	for i := range pages {
		if _, b := rawAsk(t, addr, "GET "+path(i)+" HTTP/1.1\r\nHost: x.test\r\nConnection: close\r\n\r\n"); b != want(path(i)) {
			t.Fatalf("fill %s: %q", path(i), b)
		}
	}
	hosts := []string{"x.test", "X.TEST", "x.test.", "x.test:8080", "X.Test.:80"}
	before := n.hitM.Stats().Answered
	var wg sync.WaitGroup
	errs := make(chan string, 64)
	for g := range 8 {
		wg.Go(func() {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				errs <- err.Error()
				return
			}
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(30 * time.Second))
			br := bufio.NewReader(c)
			for round := range 20 {
				var asked []string
				var b strings.Builder
				for k := range 6 {
					p := path((g*5 + round*3 + k*7) % pages)
					if (g+round)%4 == 0 && k == 3 {
						p = fmt.Sprintf("/miss-%d-%d?x=1", g, round) // a miss mid-burst
					}
					asked = append(asked, p)
					fmt.Fprintf(&b, "GET %s HTTP/1.1\r\nHost: %s\r\nUser-Agent: g%d\r\n\r\n", p, hosts[(g+k+round)%len(hosts)], g)
				}
				if _, err := io.WriteString(c, b.String()); err != nil {
					errs <- err.Error()
					return
				}
				for _, p := range asked {
					resp, err := http.ReadResponse(br, &http.Request{Method: "GET"})
					if err != nil {
						errs <- fmt.Sprintf("conn %d round %d %s: %v", g, round, p, err)
						return
					}
					body, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					if string(body) != want(p) {
						errs <- fmt.Sprintf("conn %d round %d asked %s, got %q (Cache-Status %q)", g, round, p, body, resp.Header.Get("Cache-Status"))
						return
					}
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	if got := n.hitM.Stats().Answered - before; got == 0 {
		t.Fatal("the hit path answered nothing: the test does not reach it")
	}
	valid := map[string]bool{}
	for i := range pages {
		valid[strings.TrimPrefix(path(i), "/")] = true
	}
	for _, hk := range n.proxy.HotKeys(100) {
		_, rest, ok := strings.Cut(hk.Key, "://x.test/")
		if !ok || !valid[rest] && !strings.HasPrefix(rest, "miss-") {
			t.Errorf("hot key %q is no key of a page asked", hk.Key)
		}
	}
}
