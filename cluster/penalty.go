package cluster

import (
	"net"
	"strings"
)

// climbCosts measures M, the miss penalty of the selection rule: how long a
// climb takes (the cluster's path and, behind it, the origin), as an
// exponential moving average per site. Sites differ because their origins
// do: with one origin 5 ms away and another 200 ms away, one M would make
// the ingress probe too eagerly for the first site and too timidly for the
// second. A site not yet measured uses the average over every site.
//
// The sites tracked are bounded (maxPenaltySites): a client can send any
// Host, and the first ones seen keep their slots; the rest share the
// cluster-wide average.
type climbCosts struct {
	all    float64            // s; 0 before the first climb
	bySite map[string]float64 // s, by site (lower-case host without port)
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

// siteOf names a request's site for M: its host, lower-case, without port.
func siteOf(host string) string {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	return strings.ToLower(strings.TrimSuffix(host, "."))
}
