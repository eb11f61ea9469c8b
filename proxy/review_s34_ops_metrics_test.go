// A review found (now mended): edge_rejected_requests_total{reason="overload_site"} (new with
// limits.site_reserve) is not created at 0 with the other refusal reasons.
//
// Steps: a node with two sites (any; here the metrics alone, as NewMetrics
// builds them at start); scrape /metrics before any refusal.
// Expected: every refusal reason at 0, overload_site among them, as
// NewMetrics' own comment promises ("Every refusal reason exists from the
// start (at 0), so that a dashboard shows a flat line rather than no data
// on a quiet node"), and as deploy/alerts.yml's EdgeOverload needs:
// increase(edge_rejected_requests_total{reason=~"overload|overload_site|client_limit"}[5m]) > 0.
// Got: no overload_site series until the first refusal (checked on a live
// node: `curl :9180/metrics | grep overload` shows only reason="overload"
// until a hung site's misses are refused, then overload_site 4 appears).
// Why it matters: Prometheus' increase() over a series that appears with
// its first value counts nothing for that value, so the first burst of
// overload_site refusals (one site's hung origin, the very case
// limits.site_reserve was built for) raises no EdgeOverload alert, and
// dashboard panel 40 shows "no data" rather than 0 on healthy nodes.
package proxy

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

func TestS34OpsOverloadSiteRefusalExistsAtZero(t *testing.T) {
	reg := prometheus.NewRegistry()
	NewMetrics(reg, NewStore(1<<20, 8))
	if !s34oHasSeries(t, reg, "edge_rejected_requests_total", "reason", "overload") {
		t.Fatal("control: reason=overload is not pre-created either")
	}
	if !s34oHasSeries(t, reg, "edge_rejected_requests_total", "reason", "overload_site") {
		t.Errorf(`edge_rejected_requests_total{reason="overload_site"} is missing before the first refusal; the other reasons are at 0`)
	}
}

func s34oHasSeries(t *testing.T, reg *prometheus.Registry, name, label, value string) bool {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == label && lp.GetValue() == value {
					return true
				}
			}
		}
	}
	return false
}
