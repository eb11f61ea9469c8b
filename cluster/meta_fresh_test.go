package cluster

import (
	"bytes"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestMetaStampRoundTripsAndVersion1IsRead: the stamp travels; a version
// 1 node's metadata (no stamp) is still read, with none.
func TestMetaStampRoundTripsAndVersion1IsRead(t *testing.T) {
	m := nodeMeta{Region: "eu", Incarnation: 42, Epoch: 7, Stamp: time.Now().UnixNano()}
	got, err := decodeMeta(m.encode())
	if err != nil || got != m {
		t.Fatalf("round trip: %+v, %v", got, err)
	}
	v1 := bytes.Clone(m.encode()[:len(m.encode())-metaStampSize])
	v1[2] = metaV1
	got, err = decodeMeta(v1)
	if want := (nodeMeta{Region: "eu", Incarnation: 42, Epoch: 7}); err != nil || got != want {
		t.Errorf("version 1: %+v, %v; want %+v", got, err, want)
	}
	if _, err := decodeMeta(append(bytes.Clone(v1), 0)); err == nil {
		t.Error("version 1 with a trailing byte accepted")
	}
}

// TestFreshAliveRefusesOldAnnouncementsOfNodesNotInTheView: the rule
// behind TestAReplayedJoinStreamIsRefusedOnceMemberlistForgotTheNode, case by case, with
// the refusal counted and logged once, naming the node and the remedy.
func TestFreshAliveRefusesOldAnnouncementsOfNodesNotInTheView(t *testing.T) {
	var logs syncBuffer
	c := &Cluster{cfg: Config{NodeID: "self"}, metrics: NewMetrics(prometheus.NewRegistry()), warned: newMisconfigMemory(),
		log: slog.New(slog.NewTextHandler(&logs, nil))}
	now := time.Now()
	node := func(name string, age time.Duration) *memberlist.Node {
		stamp := now.Add(-age).UnixNano()
		if age < 0 {
			stamp = 0
		}
		return &memberlist.Node{Name: name, Addr: net.ParseIP("127.0.0.1"), Port: 7946, Meta: nodeMeta{Incarnation: 1, Stamp: stamp}.encode()}
	}
	c.mlView.set(node("member", time.Hour))
	for _, tc := range []struct {
		name string
		n    *memberlist.Node
		ok   bool
	}{
		{"a new node's own announcement", node("new", time.Second), true},
		{"relayed, a refresh old", node("new", metaRefresh+maxSkew), true},
		{"a departed node's old join, replayed once memberlist forgot it", node("gone", gossipToTheDead), false},
		{"just past the bound", node("gone", metaFreshness+time.Second), false},
		{"a member's old message: memberlist's incarnations order those", node("member", time.Hour), true},
		{"this node's own", node("self", time.Hour), true},
		{"unstamped (version 1)", node("old-release", -1), true},
		{"metadata not understood: memberUp refuses it with its reason", &memberlist.Node{Name: "x", Meta: []byte("junk")}, true},
	} {
		err := c.freshAlive(tc.n, now)
		if (err == nil) != tc.ok {
			t.Errorf("%s: %v, want accepted %v", tc.name, err, tc.ok)
		}
	}
	if got := testutil.ToFloat64(c.metrics.GossipRejected.WithLabelValues("stale")); got != 2 {
		t.Errorf("stale refusals counted %v, want 2", got)
	}
	// memberlist logs the refusal through mlLogWriter: one warning per node.
	err := c.freshAlive(node("gone", gossipToTheDead), now)
	line := "[WARN] memberlist: ignoring alive message for 'gone': " + err.Error()
	for range 3 {
		_, _ = mlLogWriter{c}.Write([]byte(line))
	}
	out := logs.String()
	if strings.Count(out, "refused as old") != 1 || !strings.Contains(out, "node=gone") || !strings.Contains(out, "check its clock") {
		t.Errorf("want one warning naming the node and the remedy:\n%s", out)
	}
}

// TestAJoinRefusalNamesTheSeed: memberlist names a refusing seed in
// "failed to join ADDR: …", without from=; each seed is warned of on its
// own (a review's TestS21RefusedJoinerNamesTheSeedThatRefusedIt).
func TestAJoinRefusalNamesTheSeed(t *testing.T) {
	var logs syncBuffer
	c := &Cluster{cfg: Config{NodeID: "self"}, metrics: NewMetrics(prometheus.NewRegistry()), warned: newMisconfigMemory(),
		log: slog.New(slog.NewTextHandler(&logs, nil))}
	for _, seed := range []string{"127.0.0.1:7001", "127.0.0.2:7002"} {
		_, _ = mlLogWriter{c}.Write([]byte("[DEBUG] memberlist: Failed to join " + seed + ": failed to join " + seed + ": No installed keys could decrypt the message"))
	}
	out := logs.String()
	if !strings.Contains(out, "from=127.0.0.1 ") || !strings.Contains(out, "from=127.0.0.2 ") {
		t.Errorf("want both seeds named:\n%s", out)
	}
}

// TestARefreshIsNoUpdateForMemberUp: metadata that differs only in its
// stamp (publishMeta's refresh) is told apart from a real change.
func TestARefreshIsNoUpdateForMemberUp(t *testing.T) {
	base := nodeMeta{Region: "eu", Incarnation: 1, Epoch: 2, Stamp: 10}
	for _, tc := range []struct {
		name string
		b    nodeMeta
		same bool
	}{
		{"a refresh", nodeMeta{Region: "eu", Incarnation: 1, Epoch: 2, Stamp: 20}, true},
		{"a new epoch", nodeMeta{Region: "eu", Incarnation: 1, Epoch: 3, Stamp: 20}, false},
		{"a restart", nodeMeta{Region: "eu", Incarnation: 2, Epoch: 2, Stamp: 20}, false},
		{"another region", nodeMeta{Region: "us", Incarnation: 1, Epoch: 2, Stamp: 20}, false},
	} {
		if got := sameButStamp(base.encode(), tc.b.encode()); got != tc.same {
			t.Errorf("%s: same %v, want %v", tc.name, got, tc.same)
		}
	}
	if sameButStamp([]byte("junk"), base.encode()) {
		t.Error("metadata not understood counted as unchanged")
	}
}
