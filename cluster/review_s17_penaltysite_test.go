package cluster

import (
	"math"
	"net/http"
	"testing"

	"github.com/edgecache/edge/proxy"
)

// Found by a review, now mended (siteName reads the site as keys carry
// it, KeyPrefix): cluster/penalty.go siteName priced (and records) a fetch's miss
// penalty M under fr.Site.Name, the site's display name, while siteOf, the
// route explorer (explain.go) and the penalty's own doc use Config.SiteOf,
// the name as keys carry it ("" for the one-site shortcut). The shortcut's
// site is named "default" (config.go) but keys under "": its climbs take
// slot "default" and its misses are priced with bySite["default"], while
// the explorer reports the cluster-wide M for it. In steady state the two
// EMAs are fed the same samples and agree; after a reload from named
// sites, one of them named "default", to the origin.url shortcut, the
// probe prices the shortcut's misses with the removed "default" site's
// measured M while the explorer (and the documented intent: "" shares the
// cluster-wide M) uses the cluster-wide one: the explorer no longer shows
// the M the probe decides with.
func TestS17PenaltySiteNameOfShortcut(t *testing.T) {
	c := newTestCluster(t, "hybrid", map[string]string{"p": "127.0.0.1:1"})
	cur := map[string]string{"slow.test": "default", "fast.test": "fast"} // named sites before the reload
	c.cfg.SiteOf = func(host string) string { return cur[host] }
	req := func(host string) *http.Request { r, _ := http.NewRequest("GET", "http://"+host+"/", nil); return r }

	named := proxy.NewSite("default", false, nil)
	fast := proxy.NewSite("fast", false, nil)
	for range 100 {
		c.recordClimb(siteName(proxy.FetchRequest{Req: req("slow.test"), Site: named}, c.siteOf), 0.200e9)
		c.recordClimb(siteName(proxy.FetchRequest{Req: req("fast.test"), Site: fast}, c.siteOf), 0.005e9)
	}
	// Reload to the shortcut: every host, keys without a name, Name "default".
	cur = map[string]string{}
	shortcut := proxy.NewSite("default", true, nil)
	fr := proxy.FetchRequest{Req: req("fast.test"), Site: shortcut}

	probeSite := siteName(fr, c.siteOf)
	c.mu.Lock()
	_, probeClimb := c.missPenalty(probeSite, 0.001)
	c.mu.Unlock()
	e, err := c.Explain("http://fast.test/", nil)
	if err != nil {
		t.Fatal(err)
	}
	if probeSite != e.Site || math.Abs(probeClimb*1000-e.ClimbMs) > 1e-6 {
		t.Errorf("shortcut: the probe prices M under site %q (climb %.1f ms), the route explorer under %q (climb %.1f ms): want the same site as keys carry it (\"\")",
			probeSite, probeClimb*1000, e.Site, e.ClimbMs)
	}
}
