package cluster

import (
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/prometheus/client_golang/prometheus"
)

// edge_peer_member tells a peer that left the cluster from one that is
// down, so that EdgePeerDown (edge_peer_up == 0 and edge_peer_member == 1)
// does not page for a scale-in: a review found a peer that left on
// purpose at edge_peer_up 0 for cluster.forget_departed_after, paging
// every remaining node.
func TestPeerMemberMetricFollowsMembership(t *testing.T) {
	reg := prometheus.NewRegistry()
	a := reviewCluster(t, "a0", reg)
	node := &memberlist.Node{Name: "b1", Addr: net.ParseIP("127.0.0.1"), Port: 1, Meta: nodeMeta{Incarnation: 1}.encode()}
	member := func() string {
		t.Helper()
		return metricLine(t, reg, "edge_peer_member", "b1")
	}
	a.memberUp(node, "join")
	if got := member(); got != "1" {
		t.Fatalf("a member: edge_peer_member %q, want 1", got)
	}
	a.memberDown(node)
	if got := member(); got != "0" {
		t.Fatalf("after it left: edge_peer_member %q, want 0", got)
	}
	a.forgetDeparted(time.Now().Add(a.forgetAfter() + time.Second))
	if got := member(); got != "" {
		t.Fatalf("forgotten: edge_peer_member %q, want no series", got)
	}
}

// metricLine returns the value of name{peer=peer} in reg ("" if absent).
func metricLine(t *testing.T, reg *prometheus.Registry, name, peer string) string {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == "peer" && lp.GetValue() == peer {
					return strconv.FormatFloat(m.GetGauge().GetValue(), 'g', -1, 64)
				}
			}
		}
	}
	return ""
}
