package proxy

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// CONNECT is refused, never forwarded: the edge opens no tunnels, and a
// forwarded CONNECT (or an extended CONNECT, a WebSocket over HTTP/2 or
// HTTP/3, with its :protocol lost) reached the origin and its answer went
// back as a 200 the client took for a tunnel (a review's).
func TestConnectIsRefusedNotForwarded(t *testing.T) {
	p := newTestProxy(t, nil)
	for _, target := range []string{"127.0.0.1:1", "/ws"} {
		r := httptest.NewRequest(http.MethodConnect, "http://example.com/", nil)
		r.RequestURI = target
		w := httptest.NewRecorder()
		p.h.ServeHTTP(w, r)
		if w.Code != http.StatusNotImplemented {
			t.Errorf("CONNECT %s: %d, want 501", target, w.Code)
		}
	}
	if n := p.origin.calls.Load(); n != 0 {
		t.Errorf("the origin got %d CONNECT requests", n)
	}
	if n := testutil.ToFloat64(p.h.metrics.Rejected.WithLabelValues("connect")); n != 2 {
		t.Errorf("edge_rejected_requests_total{reason=connect} = %v, want 2", n)
	}
}

// TRACE is refused with 405, never forwarded: it echoes the request,
// credentials included (cross-site tracing), and nginx refuses it too.
func TestTraceIsRefusedNotForwarded(t *testing.T) {
	p := newTestProxy(t, nil)
	r := httptest.NewRequest(http.MethodTrace, "http://example.com/", nil)
	r.Header.Set("Cookie", "sid=secret")
	w := httptest.NewRecorder()
	p.h.ServeHTTP(w, r)
	if w.Code != http.StatusMethodNotAllowed || w.Header().Get("Allow") == "" {
		t.Errorf("TRACE: %d, Allow %q; want 405 with Allow", w.Code, w.Header().Get("Allow"))
	}
	if n := p.origin.calls.Load(); n != 0 {
		t.Errorf("the origin got %d TRACE requests", n)
	}
	if n := testutil.ToFloat64(p.h.metrics.Rejected.WithLabelValues("trace")); n != 1 {
		t.Errorf("edge_rejected_requests_total{reason=trace} = %v, want 1", n)
	}
}
