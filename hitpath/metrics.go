package hitpath

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics count what the loop does. They are plain atomics exported to
// Prometheus by functions, so that the status page reads the same numbers.
type Metrics struct {
	answered atomic.Int64
	passedBy [len(reasons)]atomic.Int64
	kept     atomic.Int64 // connections net/http keeps for good
	open     atomic.Int64
}

// reasons are every reason a request goes to net/http: the label's whole set.
var reasons = [...]string{reasonMethod, reasonVersion, reasonTarget, reasonHost, reasonField, reasonFraming, reasonSyntax, reasonTooLarge, reasonNotHit}

// passed counts a request given to net/http; forGood says the connection
// stays there.
func (m *Metrics) passed(reason string, forGood bool) {
	for i, r := range reasons {
		if r == reason {
			m.passedBy[i].Add(1)
		}
	}
	if forGood {
		m.kept.Add(1)
	}
}

// NewMetrics returns the loop's metrics, registered with reg unless it is
// nil.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{}
	if reg == nil {
		return m
	}
	reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "edge_hitpath_answered_total",
		Help: "Requests the plain listener's HTTP/1.1 hit path answered itself (fresh RAM hits of plain GET and HEAD).",
	}, func() float64 { return float64(m.answered.Load()) }))
	reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "edge_hitpath_net_http_connections_total",
		Help: "Connections the hit path left to net/http for good (a request it does not frame itself).",
	}, func() float64 { return float64(m.kept.Load()) }))
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "edge_hitpath_connections",
		Help: "Open connections on the plain listener (each starts on the hit path).",
	}, func() float64 { return float64(m.open.Load()) }))
	for i, r := range reasons {
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name:        "edge_hitpath_passed_total",
			Help:        "Requests the hit path gave to net/http, by reason: method, version, target, host, field, framing, syntax, too_large, not_hit.",
			ConstLabels: prometheus.Labels{"reason": r},
		}, func() float64 { return float64(m.passedBy[i].Load()) }))
	}
	return m
}

// Stats is a snapshot for the status page.
type Stats struct {
	Answered    int64            `json:"answered"`
	Passed      map[string]int64 `json:"passed_to_net_http"`
	Kept        int64            `json:"connections_kept_by_net_http"`
	Connections int64            `json:"connections"`
}

// Stats returns the counts so far.
func (m *Metrics) Stats() Stats {
	s := Stats{Answered: m.answered.Load(), Kept: m.kept.Load(), Connections: m.open.Load(), Passed: make(map[string]int64, len(reasons))}
	for i, r := range reasons {
		s.Passed[r] = m.passedBy[i].Load()
	}
	return s
}
