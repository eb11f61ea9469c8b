package node

import (
	"strings"
	"testing"
)

// TestS7RemovedSiteLeavesNoMetricSeries: a reload that removes a site
// deletes its origins' series (Pool.Forget: "an origin no longer
// configured must" not be reported), but edge_site_requests_total and
// edge_rate_limited_total keep a series for the removed site for the life
// of the process, so dashboards and alerts keep showing a site that is
// gone (and a renamed site shows twice).
//
// Failed before 2026-12-06; fixed: Reload deletes a removed site's series.
func TestS7RemovedSiteLeavesNoMetricSeries(t *testing.T) {
	a := newS7Origin(t, "A")
	b := newS7Origin(t, "B")
	n := startS7Node(t, "sites:\n"+s7Site("shop", []string{"shop.test"}, []string{a.URL}, "")+s7Site("gone", []string{"gone.test"}, []string{b.URL}, ""))
	n.get("gone.test", "/x")
	if code, body := n.reload("sites:\n" + s7Site("shop", []string{"shop.test"}, []string{a.URL}, "")); code != 200 {
		t.Fatalf("reload: %d %s", code, body)
	}
	_, metrics := getBody(t, "http://"+n.adm+"/metrics")
	var stale []string
	for _, l := range strings.Split(metrics, "\n") {
		if strings.HasPrefix(l, "edge_") && strings.Contains(l, `site="gone"`) {
			stale = append(stale, l)
		}
	}
	if len(stale) > 0 {
		t.Errorf("site gone was removed by a reload, /metrics still has %d series for it: %s", len(stale), strings.Join(stale, "; "))
	}
}
