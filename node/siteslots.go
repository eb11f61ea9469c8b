package node

import "github.com/prometheus/client_golang/prometheus"

// siteSlotsCollector exports each site's share of the upstream slots
// (limits.max_inflight, limits.site_reserve; proxy/slots.go): the slots
// its requests hold now and the part kept for each site. The series are
// the current table's sites only, so the label set is the configuration's.
type siteSlotsCollector struct {
	n              *Node
	held, reserved *prometheus.Desc
}

func newSiteSlotsCollector(n *Node) siteSlotsCollector {
	return siteSlotsCollector{
		n:        n,
		held:     prometheus.NewDesc("edge_site_upstream_requests", "Upstream requests (limits.max_inflight slots) each site's requests hold now.", []string{"site"}, nil),
		reserved: prometheus.NewDesc("edge_site_upstream_reserved", "The limits.max_inflight slots kept for each site (limits.site_reserve split among the sites; 0: one pool).", nil, nil),
	}
}

func (c siteSlotsCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.held
	ch <- c.reserved
}

func (c siteSlotsCollector) Collect(ch chan<- prometheus.Metric) {
	held, reserve := c.n.proxy.UpstreamBySite()
	for _, s := range c.n.sites.Load().sites {
		ch <- prometheus.MustNewConstMetric(c.held, prometheus.GaugeValue, float64(held[s.resolved.Name]), s.name)
	}
	ch <- prometheus.MustNewConstMetric(c.reserved, prometheus.GaugeValue, float64(reserve))
}
