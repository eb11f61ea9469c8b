package main

import (
	"context"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A purge owed to a node that was stopped while it went round outlives a
// crash of the node that owes it (cluster.state_dir): edge-2 is stopped,
// a purge at edge-1 is owed to it, edge-1 is killed (SIGKILL) and started
// again, edge-2 resumes, and edge-1's new process delivers the purge, so
// edge-2 no longer answers the page from the copy it held. Before, the
// purge lived in edge-1's memory only and edge-2 served the purged page
// for as long as it stayed fresh.
func TestAnOwedPurgeOutlivesACrashOfTheNodeThatOwesIt(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three processes")
	}
	dir := t.TempDir()
	nodes := startTwoNodes(t, func(n *testNode) []string { return []string{"--state-dir", filepath.Join(dir, n.id)} })
	owing, away := nodes[0], nodes[1]
	const page = "/p/4242"
	heldAtAway := func() bool {
		r, _ := get(t, "http://"+away.pub+page)
		return strings.HasPrefix(r.Header.Get("Cache-Status"), away.id+"; hit")
	}
	waitFor(t, away.id+" to hold "+page, 5*time.Second, heldAtAway)

	_ = away.cmd.Process.Signal(syscall.SIGSTOP)
	defer func() { _ = away.cmd.Process.Signal(syscall.SIGCONT) }()
	waitFor(t, "the stopped node to be suspected", 10*time.Second, func() bool {
		return metric(t, owing.adm, `edge_peer_up{peer="`+away.id+`"}`) == 0
	})
	if pb := purgeAt(t, owing, page); !strings.Contains(pb, `"peers_owed":1`) {
		t.Fatalf("purge with a stopped peer: %s, want it owed to that peer", pb)
	}

	// The owing node crashes and starts again, the other still stopped.
	_ = owing.cmd.Process.Kill()
	_ = owing.cmd.Wait()
	owing.cmd = startEdge(t, owing.args...)
	waitUp(t, "http://"+owing.adm+"/readyz")
	if got := metric(t, owing.adm, "edge_purge_owed"); got != 1 {
		t.Errorf("after its restart %s owes %v purges, want 1", owing.id, got)
	}

	_ = away.cmd.Process.Signal(syscall.SIGCONT)
	waitFor(t, "the restarted node to trust the resumed one", 20*time.Second, func() bool {
		return metric(t, owing.adm, `edge_peer_up{peer="`+away.id+`"}`) == 1
	})
	waitFor(t, "the owed purge to be delivered by the restarted node", 10*time.Second, func() bool {
		return metric(t, owing.adm, "edge_purge_owed") == 0 && metric(t, owing.adm, `edge_purge_owed_events_total{outcome="delivered"}`) >= 1
	})
	if heldAtAway() {
		t.Errorf("%s still answers %s from the copy it held before the purge its peer owed it across a crash", away.id, page)
	}
}

// A node that was down during a purge (killed, its pages on its disk tier)
// does not serve the purged page to its own clients when it starts again:
// it asks its peers for what they owe it before it serves. Before, its
// listener served at once, from the disk tier, until the peer that owed it
// the purge trusted it again and delivered.
func TestARestartedNodeServesNoPageAPurgeItMissedRemoves(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three processes")
	}
	dir := t.TempDir()
	nodes := startTwoNodes(t, func(n *testNode) []string {
		return []string{"--disk-path", filepath.Join(dir, n.id+"-disk"), "--disk-size", "64MiB"}
	})
	owing, away := nodes[0], nodes[1]
	// page is purged while away is down; kept is not, and shows that its
	// disk tier did bring pages back at the restart.
	const page, kept = "/p/4343", "/p/4344"
	for _, p := range []string{page, kept} {
		waitFor(t, away.id+" to hold "+p, 5*time.Second, func() bool {
			r, _ := get(t, "http://"+away.pub+p)
			return strings.HasPrefix(r.Header.Get("Cache-Status"), away.id+"; hit")
		})
	}
	waitFor(t, away.id+"'s disk tier to have written both", 10*time.Second, func() bool {
		return metric(t, away.adm, "edge_disk_objects") >= 2 && metric(t, away.adm, "edge_disk_queue_bytes") == 0
	})
	_ = away.cmd.Process.Kill()
	_ = away.cmd.Wait()
	waitFor(t, "the killed node to be suspected", 10*time.Second, func() bool {
		return metric(t, owing.adm, `edge_peer_up{peer="`+away.id+`"}`) == 0
	})
	if pb := purgeAt(t, owing, page); !strings.Contains(pb, `"peers_owed":1`) {
		t.Fatalf("purge with a killed peer: %s, want it owed to that peer", pb)
	}

	away.cmd = startEdge(t, away.args...)
	// Its first answer for the page, as soon as its listener takes one.
	client := &http.Client{Timeout: 10 * time.Second}
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := client.Get("http://" + away.pub + page)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if cs := resp.Header.Get("Cache-Status"); strings.HasPrefix(cs, away.id+"; hit") {
				t.Errorf("the restarted node's first answer for %s, purged while it was down: %q (its old copy)", page, cs)
			} else {
				t.Logf("its first answer: %d %q", resp.StatusCode, cs)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the restarted node never answered: %v", err)
		}
		time.Sleep(2 * time.Millisecond)
	}
	if r, _ := get(t, "http://"+away.pub+kept); !strings.HasPrefix(r.Header.Get("Cache-Status"), away.id+"; hit") {
		t.Errorf("the restarted node's answer for %s, not purged: %q, want a hit from its disk tier (else this test shows nothing)", kept, r.Header.Get("Cache-Status"))
	}
	if got := metric(t, away.adm, `edge_purge_owed_pulls_total{outcome="delivered",when="start"}`); got != 1 {
		t.Errorf(`edge_purge_owed_pulls_total{outcome="delivered",when="start"} = %v at the restarted node, want 1`, got)
	}
}

// startTwoNodes starts an origin and two cluster nodes, edge-1 and edge-2,
// each with extra(node)'s flags as well, and waits until each trusts the
// other.
func startTwoNodes(t *testing.T, extra func(*testNode) []string) []*testNode {
	t.Helper()
	origin := freeAddr(t)
	startOrigin(t, origin, "5ms")
	const secret = "e2e-two-nodes-secret-00001"
	nodes := []*testNode{
		{id: "edge-1", pub: freeAddr(t), adm: freeAddr(t), peer: freeAddr(t)},
		{id: "edge-2", pub: freeAddr(t), adm: freeAddr(t), peer: freeAddr(t)},
	}
	peers := nodes[0].id + "=" + nodes[0].peer + "," + nodes[1].id + "=" + nodes[1].peer
	for _, n := range nodes {
		n.args = append([]string{"serve", "--origin", "http://" + origin, "--listen", n.pub, "--admin-listen", n.adm,
			"--admin-token", "tok", "--node-id", n.id, "--cluster-listen", n.peer, "--peers", peers, "--secret", secret}, extra(n)...)
		n.cmd = startEdge(t, n.args...)
	}
	for _, n := range nodes {
		waitUp(t, "http://"+n.adm+"/readyz")
		waitFor(t, n.id+" to trust its peer", 30*time.Second, func() bool { return metric(t, n.adm, "edge_view_members") == 2 })
	}
	return nodes
}

// Two processes given one cluster.state_dir (a copy-pasted unit, a second
// node started by mistake) would each overwrite the other's record of what
// is owed: the second stops at its start naming the key, and the first
// goes on.
func TestASecondProcessOnAStateDirInUseStopsAtItsStart(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three processes")
	}
	dir := t.TempDir()
	nodes := startTwoNodes(t, func(n *testNode) []string { return []string{"--state-dir", filepath.Join(dir, n.id)} })
	first := nodes[0]
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	args := slices.Clone(first.args)
	for i, a := range args {
		switch a {
		case "--listen", "--admin-listen", "--cluster-listen":
			args[i+1] = freeAddr(t)
		}
	}
	cmd := exec.CommandContext(ctx, os.Args[0], args...)
	cmd.Env = append(os.Environ(), "EDGE_TEST_AS_MAIN=1")
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatal("a second process started on a state_dir in use")
	}
	if !strings.Contains(string(out), "cluster.state_dir") || !strings.Contains(string(out), "another process holds it") {
		t.Errorf("the refusal does not name the key and the reason: %s", out)
	}
	if r, _ := get(t, "http://"+first.adm+"/readyz"); r.StatusCode != http.StatusOK {
		t.Errorf("the first process after the refusal: readyz %d", r.StatusCode)
	}
}
