package h2server

import "github.com/prometheus/client_golang/prometheus"

// Metrics are the HTTP/2 server's counters.
type Metrics struct {
	conns   prometheus.Gauge
	streams *prometheus.CounterVec // answered: hit (on the read loop), handler
	errors  *prometheus.CounterVec // scope: stream (RST_STREAM), connection (GOAWAY)
	hit     prometheus.Counter
	handler prometheus.Counter
}

// NewMetrics registers the HTTP/2 server's metrics with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		conns: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "edge_http2_connections", Help: "Open HTTP/2 connections served by edge's own HTTP/2 server (tuning.http2_server: edge).",
		}),
		streams: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "edge_http2_streams_total", Help: "HTTP/2 requests by how they were answered: hit (a fresh hit answered on the connection's read loop) or handler (the full request pipeline, in a goroutine).",
		}, []string{"answered"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "edge_http2_protocol_errors_total", Help: "HTTP/2 protocol errors of clients, by scope: stream (answered with RST_STREAM) or connection (GOAWAY, then closed).",
		}, []string{"scope"}),
	}
	m.hit, m.handler = m.streams.WithLabelValues("hit"), m.streams.WithLabelValues("handler")
	m.errors.WithLabelValues("stream")
	m.errors.WithLabelValues("connection")
	reg.MustRegister(m.conns, m.streams, m.errors)
	return m
}

// StreamsAnswered is the counter of requests answered as answered says
// ("hit" or "handler"), for tests and the status page.
func (m *Metrics) StreamsAnswered(answered string) prometheus.Counter {
	return m.streams.WithLabelValues(answered)
}
