// A review found (now mended): EdgePeerDown never pages for a member that crashed, in a cluster
// whose nodes found each other by membership (cluster.join / discovery,
// not cluster.peers): memberDown sets edge_peer_member to 0 whatever the
// reason memberlist gives, a graceful leave (memberlist.StateLeft, a
// scale-in) or an agreed death (memberlist.StateDead, a crash, a power
// loss, a partition), and memberlist agrees a silent node dead within
// seconds (suspicion timeout), long before the alert's "for: 1m".
//
// Steps: a node learns member b1 by membership (memberUp "join", not
// configured); b1 crashes: the failure detector suspects it (edge_peer_up
// 0) and memberlist reports it dead (NotifyLeave with State StateDead).
// Expected: edge_peer_up 0 and edge_peer_member 1 until it is forgotten
// (forget_departed_after, 10 min) or comes back, so that
// `edge_peer_up == 0 and on(instance, peer) edge_peer_member == 1` holds
// and EdgePeerDown pages (it did before dccfb33: edge_peer_up alone). The
// alert's comment and docs/operations.md spare only a peer that "left the
// cluster on purpose (scale-in, a renamed pod)".
// Got: edge_peer_member 0 a few seconds into the outage: the alert's
// condition never holds for a minute, and a crashed node pages nobody.
// Why it matters: the one page for a dead cache node is silenced for every
// cluster that does not list its peers by hand. memberlist itself tells
// the two apart (a dead message from the node itself is StateLeft, any
// other StateDead), though v0.7.0 does not copy that into the Node handed
// to NotifyLeave (nodeState.State shadows Node.State): the test fails
// whatever State the node carries, and a fix needs a signal of its own
// (the leaving node saying so before Leave, or nodeState via Members()).
package cluster

import (
	"net"
	"testing"

	"github.com/hashicorp/memberlist"
	"github.com/prometheus/client_golang/prometheus"
)

func TestS35ACrashedMemberStillPagesEdgePeerDown(t *testing.T) {
	reg := prometheus.NewRegistry()
	a := reviewCluster(t, "a0", reg)
	node := &memberlist.Node{Name: "b1", Addr: net.ParseIP("127.0.0.1"), Port: 1, Meta: nodeMeta{Incarnation: 1}.encode(), State: memberlist.StateAlive}
	a.memberUp(node, "join")
	a.mu.Lock()
	a.setTrust(a.peers["b1"], true) // heard from: up
	a.mu.Unlock()
	if up, member := metricLine(t, reg, "edge_peer_up", "b1"), metricLine(t, reg, "edge_peer_member", "b1"); up != "1" || member != "1" {
		t.Fatalf("a trusted member: edge_peer_up %q edge_peer_member %q", up, member)
	}
	// b1 crashes: suspected, then agreed dead by memberlist.
	a.mu.Lock()
	a.setTrust(a.peers["b1"], false)
	a.mu.Unlock()
	dead := *node
	dead.State = memberlist.StateDead
	a.memberDown(&dead)
	up, member := metricLine(t, reg, "edge_peer_up", "b1"), metricLine(t, reg, "edge_peer_member", "b1")
	if up != "0" || member != "1" {
		t.Errorf("a member agreed dead (a crash, not a leave): edge_peer_up %q edge_peer_member %q; EdgePeerDown (edge_peer_up == 0 and edge_peer_member == 1) never fires for it, want up 0 and member 1", up, member)
	}
}
