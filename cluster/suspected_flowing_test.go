package cluster

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/edgecache/edge/routing"
)

// TestAFlowingStreamFromAFalselySuspectedPeerIsNotCut: a peer falsely
// suspected (its heartbeats lost, its TCP stream healthy) is streaming a
// large answer without a validator (not resumable) at a steady rate for
// longer than suspectedPeerGrace. A bound on the stream's total time (the
// first version) cut it; the rate floor lets it finish.
func TestAFlowingStreamFromAFalselySuspectedPeerIsNotCut(t *testing.T) {
	o := &countingOrigin{}
	c := newPlanCluster(t, "n0", routing.ModeRing, SelectionOff, o)
	p1 := startFakePeer(t, "p1")
	const chunks, chunk = 150, 64 << 10
	p1.setAnswer(func(w http.ResponseWriter, _ *http.Request, _ *route) {
		w.Header().Set("Cache-Control", "max-age=60")
		w.Header().Set("Content-Length", itoa(chunks*chunk))
		w.WriteHeader(200)
		for range chunks {
			if _, err := io.WriteString(w, strings.Repeat("x", chunk)); err != nil {
				return
			}
			_ = http.NewResponseController(w).Flush()
			time.Sleep(10 * time.Millisecond) // 6.4 MB/s, never silent
		}
	})
	join(c, p1)
	res := fetchHomedAtP1(t, c)
	defer res.Resp.Body.Close()
	buf := make([]byte, chunk)
	if _, err := io.ReadFull(res.Resp.Body, buf); err != nil {
		t.Fatal(err)
	}
	c.mu.Lock()
	c.setTrust(c.peers["p1"], false)
	c.mu.Unlock()
	start := time.Now()
	b, err := io.ReadAll(res.Resp.Body)
	t.Logf("after the suspicion: %d more bytes in %v, err %v (grace %v, origin %d)", len(b), time.Since(start).Round(time.Millisecond), err, c.suspectedPeerGrace(), o.n.Load())
	if err != nil || len(b)+chunk != chunks*chunk {
		t.Fatalf("a flowing stream from a falsely suspected peer was cut: %d of %d bytes, err %v", len(b)+chunk, chunks*chunk, err)
	}
}

func itoa(n int) string {
	const d = "0123456789"
	if n == 0 {
		return "0"
	}
	s := ""
	for n > 0 {
		s = string(d[n%10]) + s
		n /= 10
	}
	return s
}
