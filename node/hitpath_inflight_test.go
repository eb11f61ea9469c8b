package node

import (
	"testing"
	"time"
)

func inflightGauge(t *testing.T, n *Node) float64 {
	t.Helper()
	mfs, err := n.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "edge_inflight_requests" {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatal("no edge_inflight_requests")
	return 0
}

// TestInflightCountsAHitBeingWritten: edge_inflight_requests ("client
// requests being served") counts a ServeHTTP hit for as long as its write
// is blocked by a client that stopped reading. A hit the loop writes is
// never counted: a node full of slow readers of hits shows 0 in flight.
func TestInflightCountsAHitBeingWritten(t *testing.T) {
	hitPathModes(t, func(t *testing.T, on bool) {
		n := startNode(t, reviewOrigin(t).URL, hitPathYAML(on))
		reviewGet(t, n.PublicAddr(), "/big")
		if r := reviewGet(t, n.PublicAddr(), "/big"); r.StatusCode != 200 {
			t.Fatalf("warm-up %d", r.StatusCode)
		}
		stuckClient(t, n.PublicAddr())
		for deadline := time.Now().Add(8 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
			if inflightGauge(t, n) >= 1 {
				return
			}
		}
		t.Fatal("a hit stuck in its write was never counted in edge_inflight_requests")
	})
}
