package origin

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// Held: a member whose probes fail stays out across several probes and
// is counted as one ejection (not one per failed probe); it is back in at
// its first good probe (well before its grown backoff would end) and a
// later failed probe counts a second ejection. A pool whose every member
// fails its probes still sends requests to them.
func TestS31OriginActiveEjectionLifecycle(t *testing.T) {
	var healthy atomic.Bool
	var served atomic.Int64
	mk := func() *httptest.Server {
		s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/healthz" {
				if !healthy.Load() {
					http.Error(w, "sick", http.StatusInternalServerError)
					return
				}
				_, _ = io.WriteString(w, "ok")
				return
			}
			served.Add(1)
			_, _ = io.WriteString(w, "page")
		}))
		t.Cleanup(s.Close)
		return s
	}
	a, b := mk(), mk()
	oc := func(u string) ClientConfig {
		return ClientConfig{URL: u, ConnectTimeout: time.Second, ResponseTimeout: time.Second, MaxIdleConns: 4, IdleConnTimeout: time.Minute}
	}
	reg := prometheus.NewRegistry()
	m := NewPoolMetrics(reg)
	p, err := NewPool(PoolConfig{Site: "s", Origins: []ClientConfig{oc(a.URL), oc(b.URL)}, Metrics: m,
		BaseEject: 100 * time.Millisecond, MaxEject: 30 * time.Second,
		Health: HealthCheck{Path: "/healthz", Interval: 100 * time.Millisecond, Timeout: 200 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	p.Start()
	defer p.Stop()
	allDown := func() bool {
		for _, s := range p.States() {
			if s.Up {
				return false
			}
		}
		return true
	}
	deadline := time.Now().Add(3 * time.Second)
	for !allDown() && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if !allDown() {
		t.Fatal("members failing probes were not ejected")
	}
	time.Sleep(700 * time.Millisecond) // about 7 more failed probes each
	if !allDown() {
		t.Fatalf("a member with only failed probes came back: %+v", p.States())
	}
	ej := testutil.ToFloat64(m.Ejections.WithLabelValues("s", a.URL, "active"))
	if ej != 1 {
		t.Fatalf("ejections of a member out across ~8 failed probes: %v, want 1", ej)
	}
	// Every member out: requests are still sent to them.
	before := served.Load()
	req, _ := http.NewRequest(http.MethodGet, "/page", nil)
	resp, err := p.Fetch(context.Background(), req)
	if err != nil {
		t.Fatalf("a pool whose every member fails its probes refused a request: %v", err)
	}
	resp.Body.Close()
	if served.Load() != before+1 {
		t.Fatalf("origins served %d", served.Load()-before)
	}
	// Recovery: back at the first good probe, although the backoff has
	// grown past a second by now.
	healthy.Store(true)
	start := time.Now()
	for time.Since(start) < 2*time.Second {
		up := 0
		for _, s := range p.States() {
			if s.Up {
				up++
			}
		}
		if up == 2 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if took := time.Since(start); took > 500*time.Millisecond {
		t.Fatalf("members came back %v after their probes turned good (interval 100ms)", took)
	}
	healthy.Store(false)
	time.Sleep(300 * time.Millisecond)
	if ej := testutil.ToFloat64(m.Ejections.WithLabelValues("s", a.URL, "active")); ej < 2 {
		t.Fatalf("second ejection not counted: %v", ej)
	}
}
