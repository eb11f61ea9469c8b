package cluster

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// HOLDS: a member learnt through membership (not in cluster.peers) that
// leaves is taken off the ring at once (every page it owned goes back to
// the others), dropped from the status page's member table, and then
// forgotten with its per-peer series after cluster.forget_departed_after.
func TestS21DepartedMemberIsForgottenAndItsShareReturns(t *testing.T) {
	nodes := s21Cluster(t, []string{"a", "b"}, func(c *Config) { c.ForgetDepartedAfter = 300 * time.Millisecond })
	a, b := nodes["a"], nodes["b"]
	c := s21Start(t, "c", map[string]string{"a": a.addr})
	s21Eventually(t, 20*time.Second, "a routes to c", func() bool {
		return slices.Contains(a.c.Router().Ring().Members(), "c") && b.member("c")
	})
	owned := 0
	for i := range 200 {
		if a.c.Router().Ring().Owner("http://h/p"+strings.Repeat("x", i%7)+string(rune('a'+i%26))+string(rune('0'+i/26))) == "c" {
			owned++
		}
	}
	if owned == 0 {
		t.Fatal("c owns none of 200 pages on a's ring")
	}
	c.stop()
	s21Eventually(t, 10*time.Second, "c off a's and b's rings", func() bool {
		return !slices.Contains(a.c.Router().Ring().Members(), "c") && !slices.Contains(b.c.Router().Ring().Members(), "c")
	})
	for _, m := range a.c.MembershipDetail().Members {
		if m.ID == "c" {
			t.Errorf("the status page still lists c as a member")
		}
	}
	// The monitor forgets every 6.4 s; run its step now, past the delay.
	time.Sleep(400 * time.Millisecond)
	a.c.forgetDeparted(time.Now())
	s21Eventually(t, 5*time.Second, "c forgotten on a", func() bool {
		a.c.mu.Lock()
		defer a.c.mu.Unlock()
		return a.c.peers["c"] == nil
	})
	if n := testutil.CollectAndCount(a.c.metrics.PeerUp); n != 1 {
		t.Errorf("edge_peer_up has %d series on a after c was forgotten, want 1 (b)", n)
	}
}
