// A review found (now mended): the peer-request half of the EdgeHeartbeatForgery alert cannot
// fire on a first forgery: edge_peer_request_rejections_total has no
// series until its first rejection.
//
// Steps: start a node (here: NewMetrics as a node's start builds them);
// scrape /metrics (seen on `make run`'s nodes: no
// edge_peer_request_rejections_total line at all, while
// edge_heartbeat_rejections_total{reason="mac"|"replay"|...} are at 0).
// Expected: reason="mac" and reason="unsigned" at 0 from the start, as the
// heartbeat side has them, since deploy/alerts.yml pages on
// increase(edge_peer_request_rejections_total{reason=~"mac|unsigned"}[5m]) > 0.
// Got: no series; the first forged or unsigned peer requests create it at
// their count, and Prometheus' increase() counts nothing for a series'
// first sample.
// Why it matters: someone probing the cluster port with a handful of
// forged peer requests (one scrape interval's worth) pages nobody, the
// case docs/operations.md's alert table says the alert is for.
package cluster

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

func TestS34OpsPeerForgeryReasonsExistAtZero(t *testing.T) {
	reg := prometheus.NewRegistry()
	NewMetrics(reg)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]map[string]bool{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == "reason" {
					if seen[mf.GetName()] == nil {
						seen[mf.GetName()] = map[string]bool{}
					}
					seen[mf.GetName()][lp.GetValue()] = true
				}
			}
		}
	}
	if !seen["edge_heartbeat_rejections_total"]["mac"] {
		t.Log("control: edge_heartbeat_rejections_total{reason=mac} is not pre-created here (it is on a node)")
	}
	for _, reason := range []string{"mac", "unsigned"} {
		if !seen["edge_peer_request_rejections_total"][reason] {
			t.Errorf("edge_peer_request_rejections_total{reason=%q} is missing at start; EdgeHeartbeatForgery's increase() misses the first forgeries", reason)
		}
	}
}
