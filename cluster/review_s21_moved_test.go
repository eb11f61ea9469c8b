package cluster

import (
	"strings"
	"testing"
	"time"
)

// Found by session 21's review, now mended: a configured peer restarted on a new port (the others'
// cluster.peers not updated) flapped in and out of the membership every few seconds for good, and no
// node logged a warning naming the stale cluster.peers entry. A peer that advertised exactly its
// configured address before and another one now has moved (no relay stands in front of it):
// memberUp follows it there and warns once, naming both addresses.
//
// a, b and c are configured by IP with each other. c is restarted on a
// new port (its own cluster.peers is right). a and b keep the configured
// address for c (memberUp: "a configured peer keeps the operator's
// address") and, because it is configured by IP, also send memberlist's
// traffic for c there (transport.setPath): every probe of c, direct and
// indirect, goes to the dead old port, so c is suspected and declared
// dead; c learns it at its next push/pull, refutes, is alive again, and
// the cycle repeats (observed: joined/left on a every ~5 s for as long as
// the test ran). a logs only INFO "member joined"/"member left"; the only
// warning is on c ("a peer has sent no heartbeat since this node learned
// of it", remedy "check the address in cluster.peers"), on the node whose
// configuration is right. a's heartbeats and peer requests for c go to the
// old port too, while c's heartbeats (accepted from any source address)
// make a trust it whenever it is a member.
func TestS21ConfiguredPeerMovedToANewPortIsReportedNotFlapped(t *testing.T) {
	nodes := s21Cluster(t, []string{"a", "b", "c"})
	a, b, c := nodes["a"], nodes["b"], nodes["c"]
	old := c.addr
	c.stop()
	s21Eventually(t, 20*time.Second, "a and b see c leave", func() bool { return !a.member("c") && !b.member("c") })
	c2 := s21Start(t, "c", map[string]string{"a": a.addr, "b": b.addr})
	s21Eventually(t, 20*time.Second, "a has c back in its memberlist view at its new address", func() bool {
		return a.c.mlView.snapshot()["c"].addr == c2.addr
	})
	time.Sleep(15 * time.Second)
	logs := a.log.String()
	var warned []string
	left := 0
	for _, line := range strings.Split(logs, "\n") {
		if strings.Contains(line, "level=WARN") && strings.Contains(line, "c") && (strings.Contains(line, c2.addr) || strings.Contains(line, old)) {
			warned = append(warned, line)
		}
		if strings.Contains(line, `msg="member left"`) && strings.Contains(line, "peer=c addr="+c2.addr) {
			left++
		}
	}
	if len(warned) == 0 {
		t.Errorf("c moved from %s to %s; a (configured with c at %s) logged no warning naming either address in 15 s. a's log:\n%s", old, c2.addr, old, logs)
	}
	if left >= 2 {
		t.Errorf("c, alive and reachable at %s all along, left a's membership %d times in 15 s after it came back (memberlist's traffic for it goes to the configured %s)", c2.addr, left, old)
	}
	if got := a.peerAddr("c"); got != c2.addr {
		t.Logf("a still sends c's heartbeats and peer requests to %s (c listens on %s)", got, c2.addr)
	}
}
