package origin

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// A review found (now mended): a member that fails its active check comes back into rotation
// when its ejection's backoff runs out (1 s, then 2 s, 4 s…), not on its
// next good probe as docs/operations.md says ("an active check ejects on a
// failed probe and returns the origin on the first good one"): between
// the backoff's end and the next probe (with the documented interval of
// 5 s: 4 s, then 3 s, then 1 s of each cycle) the dead member takes its
// share of requests, and a POST sent to it is not retried: the client
// gets an error for an order another member would have taken. Steps:
// pool of a healthy member and a dead one (port closed), health check
// every 800 ms, first ejection 200 ms (the default 1 s against 5 s scaled
// down); wait for the first probe to eject the dead one, then send POSTs
// before the next probe. Expected: none reaches the dead member, which
// has had no good probe. Got: POSTs fail against it.
func TestS30OriginMemberFailingItsHealthCheckGetsTrafficBeforeItsNextProbe(t *testing.T) {
	good := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte("ok"))
	}))
	defer good.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "http://" + ln.Addr().String()
	ln.Close() // connections refused from now on
	oc := func(u string) ClientConfig {
		return ClientConfig{URL: u, ConnectTimeout: time.Second, ResponseTimeout: time.Second, MaxIdleConns: 4, IdleConnTimeout: time.Minute}
	}
	p, err := NewPool(PoolConfig{Site: "s", Origins: []ClientConfig{oc(good.URL), oc(dead)}, Metrics: NewPoolMetrics(prometheus.NewRegistry()),
		BaseEject: 200 * time.Millisecond, MaxEject: 30 * time.Second,
		Health: HealthCheck{Path: "/healthz", Interval: 800 * time.Millisecond, Timeout: 300 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	p.Start()
	defer p.Stop()
	deadUp := func() bool {
		for _, s := range p.States() {
			if s.URL == dead {
				return s.Up
			}
		}
		return false
	}
	deadline := time.Now().Add(3 * time.Second)
	for deadUp() && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if deadUp() {
		t.Fatal("the dead member was never ejected by its health check")
	}
	ejectedAt := time.Now()
	time.Sleep(300 * time.Millisecond) // past the first ejection, before the next probe
	failed, sent := 0, 0
	for time.Since(ejectedAt) < 700*time.Millisecond {
		req, _ := http.NewRequest("POST", "/order", strings.NewReader(`{"order":1}`))
		resp, err := p.Fetch(context.Background(), req)
		sent++
		if err != nil {
			failed++
		} else {
			resp.Body.Close()
		}
		time.Sleep(20 * time.Millisecond)
	}
	if failed > 0 {
		t.Fatalf("%d of %d POSTs were sent to the member whose last health check failed (no good probe since) and failed", failed, sent)
	}
}
