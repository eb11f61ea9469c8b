package cluster

import (
	"context"
	"errors"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/edgecache/edge/proxy"
	"github.com/edgecache/edge/routing"
)

// A peer that answers a purge with a signed refusal (a 4xx: a purge its
// version or configuration cannot read) did not run it. Within the round
// it used to count as one that took it: the answer said nothing of it
// (neither purged nor owed), and it was sent the peers the round missed,
// which it refused again. It is now reported (peers_refused), not owed
// (it would refuse again), and not named the failures.
func TestAPeerThatRefusesAPurgeIsReportedAndNotNamedTheFailures(t *testing.T) {
	nodes := startRealNodes(t, []string{"A", "B", "C"}, routing.ModeHybrid, 2, 100*time.Millisecond, &slowOrigin{})
	a, b, c := nodes["A"], nodes["B"], nodes["C"]
	var calls atomic.Int64
	replacePurge(t, nodes, "B", func(proxy.PurgeRequest) (int, error) {
		calls.Add(1)
		return 0, errors.New("a purge this version cannot read")
	})
	var failedC atomic.Int64
	abort := func(r *http.Request) {
		if r.URL.Path == "/_edge/purge" && failedC.Add(1) == 1 {
			panic(http.ErrAbortHandler) // C's purge fails within the round: owed, named to the takers
		}
	}
	c.hold.Store(&abort)
	_, fan, err := a.c.Purge(context.Background(), proxy.PurgeRequest{URL: "http://site.example/refused/1"}, a.ph.Purge)
	if err != nil {
		t.Fatal(err)
	}
	if fan != (FanOut{Refused: 1, Owed: 1}) {
		t.Errorf("B refused, C failed: %+v, want 1 refused and 1 owed", fan)
	}
	if n := a.c.owed.owedTo("B"); n != 0 {
		t.Errorf("A owes B %d purges: it refused, and would refuse again", n)
	}
	if n := calls.Load(); n != 1 {
		t.Errorf("B was asked to run the purge %d times: a peer that refused it was sent the round's failures as one that took it", n)
	}
	if n := b.c.owed.owedTo("C"); n != 0 {
		t.Errorf("B, which refused the purge, owes C %d", n)
	}
}

// A refusal after the round (B answers late) settles what A owed it, as a
// redelivery's refusal does, and is counted: before, B stayed owed (and out
// of A's routing view) until a redelivery was refused again.
func TestALateRefusalSettlesWhatWasOwed(t *testing.T) {
	nodes := startRealNodes(t, []string{"A", "B"}, routing.ModeHybrid, 2, 100*time.Millisecond, &slowOrigin{})
	a := nodes["A"]
	late := fanOutBound(a.c.cfg.PeerTimeout) + 200*time.Millisecond // within the late bound (4 × it)
	replacePurge(t, nodes, "B", func(proxy.PurgeRequest) (int, error) {
		time.Sleep(late)
		return 0, errors.New("a purge this version cannot read")
	})
	_, fan, err := a.c.Purge(context.Background(), proxy.PurgeRequest{URL: "http://site.example/refused/late"}, a.ph.Purge)
	if err != nil {
		t.Fatal(err)
	}
	if fan.Owed != 1 {
		t.Skipf("B's refusal came within the round on this run (%+v): nothing late to settle", fan)
	}
	// Settled, then counted: waited for both (a check between them raced).
	refusedEvents := func() float64 { return testutil.ToFloat64(a.c.metrics.OwedPurgeEvents.WithLabelValues("refused")) }
	waitUntil(t, "B's late refusal to settle what A owes it", func() bool { return a.c.owed.owedTo("B") == 0 && refusedEvents() > 0 })
	if got := testutil.ToFloat64(a.c.metrics.OwedPurgeEvents.WithLabelValues("refused")); got != 1 {
		t.Errorf(`edge_purge_owed_events_total{outcome="refused"} = %v, want 1`, got)
	}
}
