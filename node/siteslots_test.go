package node

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// One site's origin accepts connections and never answers: its misses
// hold limits.max_inflight slots until origin.response_timeout. Another
// site's misses must still be answered (a review found them all refused
// 503 with one pool for every site), and the status page and /metrics
// must show where the slots are. max_inflight 8 over two sites with the
// default limits.site_reserve 0.5: 2 kept for each, so the hung site
// takes 6 and its further misses are refused "overload_site".
func TestOneSitesHungOriginLeavesOtherSitesTheirSlots(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var held []net.Conn
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			held = append(held, c)
			mu.Unlock()
		}
	}()
	release := func() {
		_ = ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range held {
			_ = c.Close()
		}
		held = nil
	}
	t.Cleanup(release)
	live := newS7Origin(t, "LIVE")
	n := startS7Node(t, "origin: {response_timeout: 20s}\nlimits: {max_inflight: 8, max_inflight_per_client: 0}\nsites:\n"+
		s7Site("dead", []string{"dead.test"}, []string{"http://" + ln.Addr().String()}, "")+
		s7Site("live", []string{"live.test"}, []string{live.URL}, ""))

	codes := make(chan int, 10)
	var wg sync.WaitGroup
	for i := range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := net.Dial("tcp", n.pub)
			if err != nil {
				codes <- 0
				return
			}
			defer c.Close()
			fmt.Fprintf(c, "GET /p/%d HTTP/1.1\r\nHost: dead.test\r\nConnection: close\r\n\r\n", i)
			_ = c.SetReadDeadline(time.Now().Add(60 * time.Second))
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				codes <- 0
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			codes <- resp.StatusCode
		}()
	}
	// Six reach the hung origin; four are refused at once.
	refused := 0
	deadline := time.Now().Add(30 * time.Second)
	for refused < 4 && time.Now().Before(deadline) {
		select {
		case code := <-codes:
			if code != http.StatusServiceUnavailable {
				t.Fatalf("a miss of the hung site over its share was answered %d, want 503", code)
			}
			refused++
		case <-time.After(100 * time.Millisecond):
		}
	}
	waitFor(t, "the hung site's six requests to reach its origin", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(held) >= 6
	})
	if refused != 4 {
		t.Fatalf("%d of the hung site's 10 misses refused, want 4", refused)
	}

	for i := range 2 { // live's own part: two at once would fit, one after another surely
		if code, body := n.get("live.test", fmt.Sprintf("/home/%d", i)); code != http.StatusOK || !strings.Contains(body, "origin=LIVE") {
			t.Fatalf("a healthy site's miss was answered %d %q while another site's origin hung", code, strings.TrimSpace(body))
		}
	}

	var st struct {
		Sites []SiteStatus `json:"sites"`
	}
	_, body := n.admin("GET", "/status.json")
	if err := json.Unmarshal([]byte(body), &st); err != nil {
		t.Fatal(err)
	}
	got := map[string][2]int{}
	for _, s := range st.Sites {
		got[s.Name] = [2]int{s.Upstream, s.UpstreamReserved}
	}
	if got["dead"] != [2]int{6, 2} || got["live"] != [2]int{0, 2} {
		t.Errorf("status: upstream (in flight, part) by site %v, want dead [6 2], live [0 2]", got)
	}
	_, metrics := n.admin("GET", "/metrics")
	for _, want := range []string{
		`edge_site_upstream_requests{site="dead"} 6`,
		`edge_site_upstream_requests{site="live"} 0`,
		`edge_site_upstream_reserved 2`,
		`edge_rejected_requests_total{reason="overload_site"} 4`,
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}

	release() // the origin goes away: its requests end (502) and give their slots back
	wg.Wait()
	waitFor(t, "the slots to come back", func() bool {
		_, metrics := n.admin("GET", "/metrics")
		return strings.Contains(metrics, `edge_site_upstream_requests{site="dead"} 0`)
	})
}

// waitFor polls cond every 20 ms for up to 30 s (a busy machine).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
