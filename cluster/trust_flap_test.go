package cluster

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/edgecache/edge/proxy"
	"github.com/edgecache/edge/routing"
)

// TestTrustFlappingWhileStreaming: trust flaps every millisecond while
// several flowing streams (and new requests awaiting their header) are
// open; under -race: no race, no deadlock, each flowing stream whole or
// failed over, and no goroutines left.
func TestTrustFlappingWhileStreaming(t *testing.T) {
	c := newPlanCluster(t, "n0", routing.ModeRing, SelectionOff, &countingOrigin{})
	p1 := startFakePeer(t, "p1")
	const chunks, chunk = 40, 500
	p1.setAnswer(func(w http.ResponseWriter, _ *http.Request, _ *route) {
		for range chunks {
			_, _ = io.WriteString(w, strings.Repeat("x", chunk))
			_ = http.NewResponseController(w).Flush()
			time.Sleep(5 * time.Millisecond)
		}
	})
	join(c, p1)
	path := keyHomedAt(t, c, "p1")
	base := runtime.NumGoroutine()
	stop := make(chan struct{})
	var flap sync.WaitGroup
	flap.Add(1)
	go func() {
		defer flap.Done()
		tr := false
		for {
			select {
			case <-stop:
				c.mu.Lock()
				c.setTrust(c.peers["p1"], true)
				c.mu.Unlock()
				return
			default:
			}
			c.mu.Lock()
			c.setTrust(c.peers["p1"], tr)
			c.mu.Unlock()
			tr = !tr
			time.Sleep(time.Millisecond)
		}
	}()
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req := httptest.NewRequest("GET", "http://site.example"+path, nil)
			req.RequestURI = ""
			res, err := c.Fetch(context.Background(), proxy.FetchRequest{Key: proxy.CacheKey("http", "site.example", path, ""), Req: req})
			if err != nil {
				return
			}
			b, err := io.ReadAll(res.Resp.Body)
			res.Resp.Body.Close()
			if err == nil && len(b) != chunks*chunk && string(b) != "from origin" {
				t.Errorf("a body of %d bytes ended without error", len(b))
			}
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		buf := make([]byte, 1<<20)
		t.Fatalf("stuck:\n%s", buf[:runtime.Stack(buf, true)])
	}
	close(stop)
	flap.Wait()
	time.Sleep(500 * time.Millisecond)
	c.mu.Lock()
	open := len(c.peers["p1"].waiting)
	c.mu.Unlock()
	if open != 0 {
		t.Errorf("%d requests still registered with p1 after every body closed", open)
	}
	if n := runtime.NumGoroutine(); n > base+4 {
		t.Logf("goroutines %d → %d", base, n)
	}
}
