package h2server

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the HTTP/2 server's counters, exported to Prometheus and
// kept as numbers for the status page.
type Metrics struct {
	conns   prometheus.Gauge
	streams *prometheus.CounterVec // answered: hit (on the read loop), handler
	errors  *prometheus.CounterVec // scope: stream (RST_STREAM), connection (GOAWAY)

	hit, handler, streamErr, connErr     prometheus.Counter
	nHit, nHandler, nStreamErr, nConnErr atomic.Int64
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
	m.streamErr, m.connErr = m.errors.WithLabelValues("stream"), m.errors.WithLabelValues("connection")
	reg.MustRegister(m.conns, m.streams, m.errors)
	return m
}

func (m *Metrics) countHit() {
	if m != nil {
		m.hit.Inc()
		m.nHit.Add(1)
	}
}

func (m *Metrics) countHandler() {
	if m != nil {
		m.handler.Inc()
		m.nHandler.Add(1)
	}
}

func (m *Metrics) countError(stream bool) {
	switch {
	case m == nil:
	case stream:
		m.streamErr.Inc()
		m.nStreamErr.Add(1)
	default:
		m.connErr.Inc()
		m.nConnErr.Add(1)
	}
}

// Stats is the server's state for the status page.
type Stats struct {
	Connections  int   `json:"connections"`
	Hits         int64 `json:"hits"`    // answered on the read loop
	Handled      int64 `json:"handled"` // through the handler
	StreamErrors int64 `json:"stream_errors"`
	ConnErrors   int64 `json:"connection_errors"`
}

// Stats reads the server's counters (zero without Metrics).
func (s *Server) Stats() Stats {
	st := Stats{Connections: s.Conns()}
	if m := s.Metrics; m != nil {
		st.Hits, st.Handled = m.nHit.Load(), m.nHandler.Load()
		st.StreamErrors, st.ConnErrors = m.nStreamErr.Load(), m.nConnErr.Load()
	}
	return st
}
