package node

import (
	"testing"
)

// A node without tls.listen (behind a load balancer that ends TLS) counts
// its plain HTTP/1.1 requests, hits answered on the hit path and requests
// net/http serves alike: until 2026-12-07 the metric existed only with TLS.
func TestPlainNodeCountsRequestsByProtocol(t *testing.T) {
	origin := reviewOrigin(t)
	for _, hitPath := range []bool{true, false} {
		n := startNode(t, origin.URL, "tuning: {hit_path: "+map[bool]string{true: "true", false: "false"}[hitPath]+"}\n")
		for range 3 { // a miss, then hits
			if w := reviewGet(t, n.PublicAddr(), "/slow"); w.StatusCode != 200 {
				t.Fatalf("hit_path %v: %d", hitPath, w.StatusCode)
			}
		}
		if w := reviewGet(t, n.PublicAddr(), "/slow", "Cache-Control", "no-cache"); w.StatusCode != 200 {
			t.Fatalf("hit_path %v: %d", hitPath, w.StatusCode)
		}
		if v := metricValue(t, n, "edge_http_requests_by_protocol_total", "protocol", "http/1.1"); v != 4 {
			t.Errorf("hit_path %v: edge_http_requests_by_protocol_total{protocol=\"http/1.1\"} = %v after 4 requests", hitPath, v)
		}
		for _, p := range []string{"https/1.1", "h2", "h3"} {
			if v := metricValue(t, n, "edge_http_requests_by_protocol_total", "protocol", p); v != 0 {
				t.Errorf("hit_path %v: %s counted %v on a node without TLS", hitPath, p, v)
			}
		}
	}
}
