package node

import (
	"testing"
)

// TestS52HitPathCountsRequestFieldsAsNetHTTPDoes: edge_request_fields_total
// ("client request fields not forwarded as sent", by action) counts a
// client's untrusted forwarding field (replaced) and an underscore name
// (dropped) on every request ServeHTTP reads, fresh hits included (its
// sanitize runs before the look-up). The same fresh hit answered by the
// HTTP/1.1 hit path counts nothing, so the metric reads differently with
// tuning.hit_path on and off for the same traffic. A metrics
// inconsistency, not a wrong answer: whether hits should count at all is
// a question of the metric's meaning; the two paths disagree either way.
func TestS52HitPathCountsRequestFieldsAsNetHTTPDoes(t *testing.T) {
	n := startNode(t, reviewOrigin(t).URL, "tuning: {hit_path: true}\n")
	addr := n.PublicAddr()
	rawAsk(t, addr, "GET /f HTTP/1.1\r\nHost: x.test\r\nConnection: close\r\n\r\n") // fill
	fields := "X-Forwarded-For: 203.0.113.9\r\nX_Custom: 1\r\n"
	delta := func(extra string) (map[string]float64, int64) {
		t.Helper()
		before, hits := n.proxy.FieldStats(), n.hitM.Stats().Answered
		resp, body := rawAsk(t, addr, "GET /f HTTP/1.1\r\nHost: x.test\r\n"+fields+extra+"Connection: close\r\n\r\n")
		if body != "public" {
			t.Fatalf("GET /f: %d %q", resp.StatusCode, body)
		}
		after := n.proxy.FieldStats()
		out := map[string]float64{}
		for k, v := range after {
			out[k] = v - before[k]
		}
		return out, n.hitM.Stats().Answered - hits
	}
	slow, slowHits := delta("Cache-Control: max-stale=1\r\n")
	fast, fastHits := delta("")
	if slowHits != 0 || fastHits != 1 {
		t.Fatalf("the hit path answered %d (want 0) and %d (want 1)", slowHits, fastHits)
	}
	for _, k := range []string{"dropped", "replaced"} {
		if slow[k] != fast[k] {
			t.Errorf("edge_request_fields_total{action=%q}: +%v for the hit ServeHTTP answered, +%v for the same hit the hit path answered", k, slow[k], fast[k])
		}
	}
}
