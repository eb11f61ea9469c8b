package cluster

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/edgecache/edge/proxy"
	"github.com/edgecache/edge/routing"
)

// A peer whose purge ran but left a file on its failing disk answers 500.
// It was counted neither purged nor owed, so the purge's answer said
// nothing of it: the file comes back at the peer's next start. It is now
// counted apart (peers_incomplete), not owed (sending it again would not
// remove the file), and a redelivery that meets it is counted so.
func TestAPeerWhosePurgeLeftAFileIsReportedIncomplete(t *testing.T) {
	nodes := startRealNodes(t, []string{"A", "B"}, routing.ModeHybrid, 2, 100*time.Millisecond, &slowOrigin{})
	a, b := nodes["A"], nodes["B"]
	replacePurge(t, nodes, "B", func(p proxy.PurgeRequest) (int, error) {
		n, err := b.ph.Purge(p)
		if err != nil {
			return n, err
		}
		return n, fmt.Errorf("removing a file of %v: read-only file system: %w", p, proxy.ErrPurgeIncomplete)
	})
	fillAt(t, b, "/disk/1")
	_, fan, _ := a.c.Purge(context.Background(), proxy.PurgeRequest{URL: "http://site.example/disk/1"}, a.ph.Purge)
	if fan != (FanOut{Incomplete: 1}) {
		t.Errorf("a purge B ran with a file left: %+v, want 1 incomplete, none purged or owed", fan)
	}
	if n := a.c.owed.owedTo("B"); n != 0 {
		t.Errorf("A owes B %d purges: it ran the purge, and sending it again would not remove the file", n)
	}
	if storedAt(b, "/disk/1") {
		t.Error("B still serves the page: its purge ran")
	}

	// Owed while B was away, delivered when it is back: counted apart.
	setTrusted(a, "B", false)
	if _, fan, _ := a.c.Purge(context.Background(), proxy.PurgeRequest{URL: "http://site.example/disk/2"}, a.ph.Purge); fan.Owed != 1 {
		t.Fatalf("a purge with B away: %+v, want owed 1", fan)
	}
	setTrusted(a, "B", true)
	redeliverNow(t, a)
	if got := testutil.ToFloat64(a.c.metrics.OwedPurgeEvents.WithLabelValues("incomplete")); got != 1 {
		t.Errorf(`edge_purge_owed_events_total{outcome="incomplete"} = %v, want 1`, got)
	}
	if n := a.c.owed.owedTo("B"); n != 0 {
		t.Errorf("after the delivery A owes B %d purges, want 0", n)
	}
}

// A review's: a peer whose purge runs past the round and then answers 500
// settled what it was owed silently: the purge's answer had gone (owed 1)
// and nothing else said a file stayed on its disk. The late answer is now
// counted as a redelivery's is.
func TestALateIncompleteAnswerIsReported(t *testing.T) {
	nodes := startRealNodes(t, []string{"A", "B"}, routing.ModeHybrid, 2, 100*time.Millisecond, &slowOrigin{})
	a, b := nodes["A"], nodes["B"]
	late := fanOutBound(a.c.cfg.PeerTimeout) + 200*time.Millisecond // within the late bound (4 × it)
	replacePurge(t, nodes, "B", func(p proxy.PurgeRequest) (int, error) {
		time.Sleep(late)
		n, err := b.ph.Purge(p)
		if err != nil {
			return n, err
		}
		return n, fmt.Errorf("removing a file: read-only file system: %w", proxy.ErrPurgeIncomplete)
	})
	_, fan, _ := a.c.Purge(context.Background(), proxy.PurgeRequest{URL: "http://site.example/late/1"}, a.ph.Purge)
	t.Logf("fan-out: %+v", fan)
	waitUntil(t, "the late answer to settle", func() bool { return a.c.owed.owedTo("B") == 0 })
	if fan.Incomplete == 0 && testutil.ToFloat64(a.c.metrics.OwedPurgeEvents.WithLabelValues("incomplete")) == 0 {
		t.Errorf("B's late 500 (a file left on its disk) settled what A owed it and was reported nowhere: answer %+v", fan)
	}
}
