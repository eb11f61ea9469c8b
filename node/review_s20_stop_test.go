package node

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/edgecache/edge/config"
)

// Review s20: node.Run's "Shutdown, then Close on error" for the admin
// server shares sctx with the public and cluster drains. Once that deadline
// is spent (here shutdown_timeout 50 ms; in production a public download
// longer than the 15 s default), admin.Shutdown fails at once, and the
// first version's Close cut every admin request under way, though
// cluster.Close, right after, waits for the purge rounds under way
// precisely so that their answers can say what they owe. Now mended: the
// admin and cluster servers are closed after cluster.Close and a second's
// grace (stopAnswerGrace). Same flow as
// TestOwedReviewAPurgeInItsRoundAtShutdown..., asserting the answer arrives.
func TestS20AdminPurgeInItsRoundAtAStopGetsItsAnswer(t *testing.T) {
	if testing.Short() {
		t.Skip("starts two clustered nodes")
	}
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=600")
		_, _ = io.WriteString(w, "page "+r.URL.Path)
	}))
	t.Cleanup(origin.Close)
	clA, clB := freeAddr(t), freeAddr(t)
	fwd := newReviewForwarder(t, clB) // A reaches B through it
	stateDir := t.TempDir()
	yaml := func(id, cl, peers, extra string) string {
		return "node_id: " + id + "\nlisten: '" + freeAddr(t) + "'\nadmin: {listen: '" + freeAddr(t) + "', token: 'admin-token-0123456789'}\n" +
			"origin: {url: '" + origin.URL + "'}\nshutdown_timeout: 50ms\n" +
			"cluster: {listen: '" + cl + "', peers: '" + peers + "', secret: 'a-test-cluster-secret', heartbeat_period: 50ms, peer_timeout: 300ms" + extra + "}\n"
	}
	run := func(y string) (*Node, context.CancelFunc, chan error) {
		cfg, err := config.LoadBytes([]byte(y))
		if err != nil {
			t.Fatal(err)
		}
		n, err := New(cfg, slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- n.Run(ctx) }()
		return n, cancel, done
	}
	a, stopA, doneA := run(yaml("a", clA, "a="+clA+",b="+fwd.addr, ", state_dir: '"+stateDir+"'"))
	b, stopB, doneB := run(yaml("b", clB, "a="+clA+",b="+clB, ""))
	t.Cleanup(func() { stopB(); <-doneB })
	aStopped := false
	t.Cleanup(func() {
		if !aStopped {
			stopA()
			<-doneA
		}
	})
	deadline := time.Now().Add(15 * time.Second)
	for {
		ok := true
		for _, n := range []*Node{a, b} {
			ps := n.cluster.Peers()
			ok = ok && len(ps) == 1 && ps[0].Trusted
		}
		if ok && a.cluster.Pulled() != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("peers not trusted in 15 s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	close(fwd.stall)
	type answer struct {
		code int
		body string
	}
	got := make(chan answer, 1)
	go func() {
		req, _ := http.NewRequest("POST", "http://"+a.AdminAddr()+"/purge?url="+origin.URL+"/review/shutdown", nil)
		req.Header.Set("Authorization", "Bearer admin-token-0123456789")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			got <- answer{0, err.Error()}
			return
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		got <- answer{resp.StatusCode, string(body)}
	}()
	select {
	case <-fwd.arrived:
	case <-time.After(15 * time.Second):
		t.Fatal("the purge did not reach B's forwarder")
	}
	stopA() // SIGTERM while the round waits for B
	if err := <-doneA; err != nil {
		t.Logf("a's Run: %v", err)
	}
	aStopped = true
	ans := <-got
	fwd.relOnce.Do(func() { close(fwd.release) })
	state, err := os.ReadFile(filepath.Join(stateDir, "owed-purges.json"))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("admin answer: %d %s; state file: %s", ans.code, strings.TrimSpace(ans.body), state)
	if ans.code == 0 {
		t.Errorf("the admin client got no answer (%s) for a purge cluster.Close waited for and wrote: a close after a spent deadline cut its connection (want 200, peers_owed 1)", ans.body)
	}
}
