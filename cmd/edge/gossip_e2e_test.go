package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestSubsetMonitoringEndToEnd: eight processes with bounded-subset
// monitoring (--monitoring subset --monitor-peers 2) each heartbeat at most
// two peers, yet every node has all seven others in its view (membership:
// memberlist on the cluster port); a SIGKILLed node leaves every
// survivor's view, including those that never heard from it directly
// (memberlist's agreed death), and requests keep succeeding everywhere.
func TestSubsetMonitoringEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("starts eight processes")
	}
	origin := freeAddr(t)
	startOrigin(t, origin, "2ms")
	const n = 8
	var nodes []*testNode
	var peers []string
	for i := 1; i <= n; i++ {
		nd := &testNode{id: fmt.Sprintf("sub-%d", i), pub: freeAddr(t), adm: freeAddr(t), peer: freeAddr(t)}
		nodes = append(nodes, nd)
		peers = append(peers, nd.id+"="+nd.peer)
	}
	for _, nd := range nodes {
		nd.cmd = startEdge(t, "serve", "--origin", "http://"+origin, "--listen", nd.pub, "--admin-listen", nd.adm,
			"--node-id", nd.id, "--cluster-listen", nd.peer, "--peers", strings.Join(peers, ","),
			"--secret", "e2e-gossip-secret-0123", "--monitoring", "subset", "--monitor-peers", "2", "--log-level", "warn")
	}
	waitUp(t, "http://"+origin+"/_stats")
	for _, nd := range nodes {
		waitUp(t, "http://"+nd.adm+"/readyz")
	}
	for _, nd := range nodes {
		waitFor(t, nd.id+" to trust all peers", 60*time.Second, func() bool { return metric(t, nd.adm, "edge_view_members") == n })
		if m := metric(t, nd.adm, "edge_cluster_monitored_peers"); m < 1 || m > 2 {
			t.Errorf("%s monitors %v peers, want 1..2", nd.id, m)
		}
		if metric(t, nd.adm, "edge_cluster_monitoring_subset") != 1 {
			t.Errorf("%s is not in subset mode", nd.id)
		}
	}

	victim := nodes[3]
	monitoredBy := map[string]bool{}
	for _, nd := range nodes {
		for _, p := range statusPeers(t, nd.adm) {
			if p.ID == victim.id && p.Monitored {
				monitoredBy[nd.id] = true
			}
		}
	}
	_ = victim.cmd.Process.Signal(syscall.SIGKILL)
	var survivors []*testNode
	for _, nd := range nodes {
		if nd != victim {
			survivors = append(survivors, nd)
		}
	}
	took := waitFor(t, "every survivor to suspect "+victim.id, 30*time.Second, func() bool {
		for _, nd := range survivors {
			if metric(t, nd.adm, "edge_view_members") != n-1 {
				return false
			}
		}
		return true
	})
	if len(monitoredBy) >= len(survivors) {
		t.Fatalf("all %d survivors monitored %s directly: membership's death not exercised", len(monitoredBy), victim.id)
	}
	t.Logf("SIGKILL of %s: out of all %d survivors' views within %v (%d monitored it, %d learned from membership)",
		victim.id, len(survivors), took.Round(time.Millisecond), len(monitoredBy), len(survivors)-len(monitoredBy))
	for i, nd := range survivors {
		resp, body := get(t, fmt.Sprintf("http://%s/p/%d", nd.pub, 900+i))
		if resp.StatusCode != http.StatusOK || len(body) == 0 {
			t.Errorf("%s after the crash: %d", nd.id, resp.StatusCode)
		}
	}
}

// statusPeers reads a node's peer table from /status.json.
func statusPeers(t *testing.T, adm string) []struct {
	ID        string `json:"id"`
	Monitored bool   `json:"monitored"`
} {
	t.Helper()
	resp, err := http.Get("http://" + adm + "/status.json")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var s struct {
		Peers []struct {
			ID        string `json:"id"`
			Monitored bool   `json:"monitored"`
		} `json:"peers"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&s); err != nil {
		t.Fatal(err)
	}
	return s.Peers
}
