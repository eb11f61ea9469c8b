package cluster

import (
	"github.com/edgecache/edge/proxy"
)

// climbCosts measures M, the miss penalty of the selection rule: how long a
// climb takes (the cluster's path and, behind it, the origin), as an
// exponential moving average per site. Sites differ because their origins
// do: with one origin 5 ms away and another 200 ms away, one M would make
// the ingress probe too eagerly for the first site and too timidly for the
// second. A site not yet measured uses the average over every site.
//
// Sites are the configured ones (Config.SiteOf: the name the proxy
// puts in cache keys), never a client's raw Host: a client choosing Hosts
// must not be able to take the table's slots or set another site's M. The
// table is still bounded (maxPenaltySites) as a second line of defence.
type climbCosts struct {
	all    float64            // s; 0 before the first climb
	bySite map[string]float64 // s, by configured site name
}

const (
	maxPenaltySites = 256
	// penaltyWeight is the EMA's weight of a new climb: about the last 20
	// climbs count, so M follows an origin that slows down within seconds
	// of traffic but one slow climb does not double it.
	penaltyWeight = 0.05
)

func ema(old, sample float64) float64 {
	if old == 0 {
		return sample
	}
	return old + penaltyWeight*(sample-old)
}

// record adds one climb of d seconds for site.
func (cc *climbCosts) record(site string, d float64) {
	cc.all = ema(cc.all, d)
	if site == "" {
		return
	}
	if cc.bySite == nil {
		cc.bySite = map[string]float64{}
	}
	if old, ok := cc.bySite[site]; ok || len(cc.bySite) < maxPenaltySites {
		cc.bySite[site] = ema(old, d)
	}
}

// forSite returns the climb latency (s) to price a miss on site, and
// whether it was measured for that site itself.
func (cc *climbCosts) forSite(site string) (float64, bool) {
	if v, ok := cc.bySite[site]; ok {
		return v, true
	}
	return cc.all, false
}

// siteOf names host's site for M: the configured site that serves it
// ("" for the one-site shortcut and without Config.SiteOf, when every
// request shares the cluster-wide M).
func (c *Cluster) siteOf(host string) string {
	if c.cfg.SiteOf != nil {
		return c.cfg.SiteOf(host)
	}
	return ""
}

// siteName is the site of a fetch as keys carry it ("" for the one-site
// shortcut, whose Name is "default"): the one its front resolved, or
// siteOf its Host's without one. With the Name, the shortcut's climbs
// filled and priced a slot of their own, which the route explorer (siteOf)
// never read, and a reload from a named site "default" to the shortcut
// priced its misses with the removed site's figure (a review).
func siteName(fr proxy.FetchRequest, siteOf func(host string) string) string {
	if fr.Site != nil {
		return fr.Site.KeyName()
	}
	return siteOf(fr.Req.Host)
}
