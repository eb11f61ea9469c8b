package main

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/edgecache/edge/cluster/wire"
	"github.com/edgecache/edge/internal/e2e"
	"github.com/edgecache/edge/internal/promtext"
	"github.com/edgecache/edge/load"
)

type testNode struct {
	id, pub, adm, peer string
	args               []string
	cmd                *exec.Cmd
}

func originCount(t *testing.T, origin, path string) int {
	t.Helper()
	return e2e.OriginStats(t, origin, path).Paths[path]
}

// TestClusterEndToEnd runs an origin and five edge processes on loopback.
// purgeAt purges path (by URL) through n's admin listener, with the
// tests' token, and returns the answer's body.
func purgeAt(t *testing.T, n *testNode, path string) string {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, "http://"+n.adm+"/purge?url=http://"+n.pub+path, nil)
	req.Header.Set("Authorization", "Bearer tok")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

func TestClusterEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("starts five processes")
	}
	// whole is this test's t: a process started in a subtest with the
	// subtest's t would be killed by its cleanup when the subtest ends.
	whole := t
	origin := freeAddr(t)
	startOrigin(t, origin, "5ms")
	const secret = "e2e-cluster-secret-0123"
	var nodes []*testNode
	var peers []string
	for i := 1; i <= 5; i++ {
		n := &testNode{id: fmt.Sprintf("edge-%d", i), pub: freeAddr(t), adm: freeAddr(t), peer: freeAddr(t)}
		nodes = append(nodes, n)
		peers = append(peers, n.id+"="+n.peer)
	}
	for _, n := range nodes {
		n.args = []string{"serve", "--origin", "http://" + origin, "--listen", n.pub, "--admin-listen", n.adm,
			"--admin-token", "tok", "--node-id", n.id, "--cluster-listen", n.peer, "--peers", strings.Join(peers, ","), "--secret", secret}
		n.cmd = startEdge(t, n.args...)
	}
	waitUp(t, "http://"+origin+"/_stats")
	for _, n := range nodes {
		waitUp(t, "http://"+n.adm+"/readyz")
	}
	for _, n := range nodes {
		waitFor(t, n.id+" to trust all peers", 30*time.Second, func() bool { return metric(t, n.adm, "edge_view_members") == 5 })
	}

	t.Run("one cache", func(t *testing.T) {
		// 1. The cluster is one cache: each page reaches the origin once,
		// whichever nodes the requests enter, while every node trusts
		// every other. A suspicion (a false one: two busy loops beside
		// five raced nodes made one in a loaded make test) sends a page
		// to its next home, which fetches it once more, by design.
		suspicionsBefore := suspicions(t, nodes)
		for round := range 3 {
			for p := range 20 {
				n := nodes[(p+round)%len(nodes)]
				resp, body := get(t, "http://"+n.pub+"/p/"+strconv.Itoa(p))
				if resp.StatusCode != 200 || len(body) == 0 {
					t.Fatalf("page %d via %s: %d", p, n.id, resp.StatusCode)
				}
			}
		}
		// A page another node holds: the answer's Cache-Status has that
		// node's member before this node's (RFC 9211: one per cache on the
		// path), so an operator sees which cache answered.
		sawPeerMember := false
		for p := range 20 {
			for _, n := range nodes {
				resp, _ := get(t, "http://"+n.pub+"/p/"+strconv.Itoa(p)+"?fresh-key=1")
				cs := resp.Header.Get("Cache-Status")
				if strings.Count(cs, "edge-") == 2 && strings.Contains(cs, ", "+n.id+"; fwd=") {
					sawPeerMember = true
				}
			}
		}
		if !sawPeerMember {
			t.Error("no answer through a peer carried the peer's Cache-Status member before the ingress's")
		}
		allowed := 1
		if s := suspicions(t, nodes) - suspicionsBefore; s > 0 {
			allowed = 2
			t.Logf("%v suspicions while the pages were fetched: a page may reach the origin twice", s)
		}
		for p := range 20 {
			if c := originCount(t, origin, "/p/"+strconv.Itoa(p)); c < 1 || c > allowed {
				t.Errorf("origin fetched /p/%d %d times, want 1 (at most %d)", p, c, allowed)
			}
		}
		if allowed > 1 {
			return
		}
		// Each node's own view agrees: every origin fetch it made was a page's first.
		for _, n := range nodes {
			first := metric(t, n.adm, `edge_origin_fetches_per_page_bucket{le="1"}`)
			all := metric(t, n.adm, "edge_origin_fetches_per_page_count")
			if first != all {
				t.Errorf("%s: %v of %v origin fetches were a page's first", n.id, first, all)
			}
		}
	})

	t.Run("redirects pass through peers", func(t *testing.T) {
		// A cached 301 answered by a peer reaches the client as the 301:
		// the ingress must not follow it (the peer client once did).
		noFollow := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
		for round := range 2 {
			for i, n := range nodes {
				resp, err := noFollow.Get(fmt.Sprintf("http://%s/redirect/%d", n.pub, 700+i%3))
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				if resp.StatusCode != http.StatusMovedPermanently || resp.Header.Get("Location") != fmt.Sprintf("/p/%d", 700+i%3) {
					t.Errorf("round %d via %s: %d, Location %q, Cache-Status %q; want the origin's 301", round, n.id, resp.StatusCode,
						resp.Header.Get("Location"), resp.Header.Get("Cache-Status"))
				}
			}
		}
	})

	t.Run("forged peer request", func(t *testing.T) {
		// 2. A forged peer request (no signature) gets nothing.
		resp, err := http.Get("http://" + nodes[0].peer + "/p/1")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden {
			t.Errorf("unsigned peer request: %d, want 403", resp.StatusCode)
		}
		if metric(t, nodes[0].adm, `edge_peer_request_rejections_total{reason="unsigned"}`) < 1 {
			t.Error("unsigned peer request not counted")
		}
	})

	t.Run("forged heartbeat", func(t *testing.T) {
		// 3. A forged heartbeat (wrong secret) is rejected and counted.
		forged, err := wire.Heartbeat{Node: "edge-2", To: "edge-1", Incarnation: 1, Seq: 1, SendNs: time.Now().UnixNano()}.Encode([]byte("wrong"))
		if err != nil {
			t.Fatal(err)
		}
		conn, err := net.Dial("udp", nodes[0].peer)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = conn.Write(forged)
		conn.Close()
		waitFor(t, "the forged heartbeat to be counted", 2*time.Second, func() bool {
			return metric(t, nodes[0].adm, `edge_heartbeat_rejections_total{reason="mac"}`) >= 1
		})
	})

	t.Run("purge fan-out", func(t *testing.T) {
		// 4. Purge at one node reaches every node.
		if pb := purgeAt(t, nodes[0], "/p/3"); !strings.Contains(pb, `"peers_purged":4`) {
			t.Errorf("purge fan-out: %s", pb)
		}
		for _, n := range nodes {
			get(t, "http://"+n.pub+"/p/3")
		}
		if c := originCount(t, origin, "/p/3"); c != 2 {
			t.Errorf("after purge /p/3 reached the origin %d times in all, want 2", c)
		}
	})

	t.Run("SIGKILL and restart", func(t *testing.T) {
		// 5. SIGKILL one node under a Zipf load plus a flash crowd on one page:
		// no client request fails at the survivors, and every survivor suspects
		// it within a second.
		victim := nodes[4]
		survivors := nodes[:4]
		zipf := load.NewZipf(0.8, 2000)
		var failed, done atomic.Int64
		stop := make(chan struct{})
		var wg sync.WaitGroup
		client := &http.Client{Timeout: 5 * time.Second}
		for w := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rng := rand.New(rand.NewPCG(uint64(w), 1))
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					default:
					}
					n := survivors[(i+w)%len(survivors)]
					page := "/p/1000" // the flash crowd: a third of the requests
					if i%3 != 0 {
						page = "/p/" + strconv.Itoa(2000+zipf.Sample(rng))
					}
					r, err := client.Get("http://" + n.pub + page)
					if err != nil || r.StatusCode != 200 {
						failed.Add(1)
					}
					if r != nil {
						_, _ = io.Copy(io.Discard, r.Body)
						r.Body.Close()
					}
					done.Add(1)
				}
			}()
		}
		time.Sleep(500 * time.Millisecond)
		killed := time.Now()
		_ = victim.cmd.Process.Signal(syscall.SIGKILL)
		_ = victim.cmd.Wait()
		for _, n := range survivors {
			waitFor(t, n.id+" to suspect "+victim.id, 5*time.Second, func() bool {
				return metric(t, n.adm, `edge_peer_up{peer="`+victim.id+`"}`) == 0
			})
		}
		worst := time.Since(killed) // the last survivor's suspicion, seen through metrics polled every 20 ms
		time.Sleep(time.Second)
		close(stop)
		wg.Wait()
		t.Logf("SIGKILL: %d requests at the survivors, %d failed; every survivor suspected %s within %s", done.Load(), failed.Load(), victim.id, worst.Round(time.Millisecond))
		if failed.Load() != 0 {
			t.Errorf("%d client requests failed at the surviving ingresses", failed.Load())
		}
		// The detection time is a measured figure (docs/cluster.md), not an
		// assertion: on a loaded machine heartbeats and the metric polls above
		// both slow down. The waits above already fail if a survivor never
		// suspects the dead node within 5 s.

		// 6. Restart: the node rejoins as a new incarnation and is trusted again.
		// Started with the whole test's t: the subtest's cleanup would
		// kill it at the end of this step, and the next step would then
		// see a dead node suspected, as it did before this fix.
		victim.cmd = startEdge(whole, victim.args...)
		waitFor(t, "the restarted node to be trusted again", 20*time.Second, func() bool {
			return metric(t, survivors[0].adm, `edge_peer_up{peer="`+victim.id+`"}`) == 1
		})
	})

	t.Run("SIGSTOP and SIGCONT", func(t *testing.T) {
		// 7. SIGSTOP (a slow, silent peer): suspected, requests keep working;
		// SIGCONT: trusted again.
		slow := nodes[1]
		// A page the slow node holds itself, which is purged while it is
		// stopped: owed to it, and delivered once it is back.
		const owedPage = "/p/777"
		heldAtSlow := func() bool {
			r, _ := get(t, "http://"+slow.pub+owedPage)
			return strings.HasPrefix(r.Header.Get("Cache-Status"), slow.id+"; hit")
		}
		waitFor(t, "the slow node to hold "+owedPage, 5*time.Second, heldAtSlow)
		_ = slow.cmd.Process.Signal(syscall.SIGSTOP)
		waitFor(t, "the stopped node to be suspected", 10*time.Second, func() bool {
			return metric(t, nodes[0].adm, `edge_peer_up{peer="`+slow.id+`"}`) == 0
		})
		if pb := purgeAt(t, nodes[0], owedPage); !strings.Contains(pb, `"peers_owed":1`) {
			t.Errorf("purge with a stopped peer: %s, want it owed to that peer", pb)
		}
		for p := range 20 {
			start := time.Now()
			r, _ := get(t, "http://"+nodes[0].pub+"/p/"+strconv.Itoa(500+p))
			if r.StatusCode != 200 {
				t.Errorf("request during SIGSTOP: %d", r.StatusCode)
			}
			// A liveness bound, not a latency target (that is measured in
			// docs/cluster.md): the request must not wait for the stopped peer.
			if d := time.Since(start); d > 10*time.Second {
				t.Errorf("request during SIGSTOP took %s", d)
			}
		}
		_ = slow.cmd.Process.Signal(syscall.SIGCONT)
		waitFor(t, "the resumed node to be trusted again", 15*time.Second, func() bool {
			return metric(t, nodes[0].adm, `edge_peer_up{peer="`+slow.id+`"}`) == 1
		})
		waitFor(t, "the owed purge to be delivered", 10*time.Second, func() bool {
			return metric(t, nodes[0].adm, "edge_purge_owed") == 0 && metric(t, nodes[0].adm, `edge_purge_owed_events_total{outcome="delivered"}`) >= 1
		})
		if heldAtSlow() {
			t.Errorf("the resumed node still answers %s from the copy it held before the purge", owedPage)
		}
	})

	t.Run("a silent home costs the origin one fetch", func(t *testing.T) {
		// 8. A home goes silent and new pages arrive at every other node,
		// before and after they suspect it. Each ingress that meets the
		// silent home asks the page's next home in its place, the cache
		// that is the home once the silent one is suspected, so each page
		// reaches the origin once, not once per ingress (as a direct
		// failover to the origin did).
		silent := nodes[2]
		_ = silent.cmd.Process.Signal(syscall.SIGSTOP)
		defer func() {
			_ = silent.cmd.Process.Signal(syscall.SIGCONT)
			for _, n := range nodes {
				waitFor(t, "the resumed node to be trusted again", 15*time.Second, func() bool {
					return n == silent || metric(t, n.adm, `edge_peer_up{peer="`+silent.id+`"}`) == 1
				})
			}
		}()
		// Suspicions of the nodes that are not silent, and asks of a next
		// home that failed: on a machine so busy that a live node misses
		// its heartbeats or its answer comes late (a loaded clean-clone
		// run), an ingress rightly routes around it, and a page may then
		// reach the origin from two places; that is failover, not the
		// defect this checks. Without either, exactly once.
		wrongSuspicions := func() float64 {
			var sum float64
			for _, n := range nodes {
				if n == silent {
					continue
				}
				sum += max(0, metric(t, n.adm, `edge_climb_hops_total{outcome="next_home_failed"}`))
				for _, o := range nodes {
					if o != silent && n != o {
						sum += max(0, metric(t, n.adm, `edge_peer_suspicions_total{peer="`+o.id+`"}`))
					}
				}
			}
			return sum
		}
		before := wrongSuspicions()
		for p := range 30 {
			for _, n := range nodes {
				if n == silent {
					continue
				}
				r, _ := get(t, "http://"+n.pub+"/p/"+strconv.Itoa(900+p))
				if r.StatusCode != 200 {
					t.Fatalf("page %d via %s: %d", 900+p, n.id, r.StatusCode)
				}
			}
		}
		wrong := wrongSuspicions() - before
		allowed := 1
		if wrong > 0 {
			allowed = 2
			t.Logf("%g suspicions of live nodes or failed asks of a next home meanwhile (a busy machine): a page may be fetched twice", wrong)
		}
		for p := range 30 {
			if c := originCount(t, origin, "/p/"+strconv.Itoa(900+p)); c < 1 || c > allowed {
				t.Errorf("origin fetched /p/%d %d times with a silent home, want 1 (at most %d)", 900+p, c, allowed)
			}
		}
	})
}

// suspicions is edge_peer_suspicions_total summed over every node's peers.
func suspicions(t *testing.T, nodes []*testNode) float64 {
	t.Helper()
	var sum float64
	for _, n := range nodes {
		samples, err := promtext.Scrape(context.Background(), "http://"+n.adm+"/metrics")
		if err != nil {
			t.Fatalf("%s: metrics: %v", n.id, err)
		}
		for k, v := range samples {
			if strings.HasPrefix(k, "edge_peer_suspicions_total") {
				sum += v
			}
		}
	}
	return sum
}
