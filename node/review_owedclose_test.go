package node

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/edgecache/edge/config"
)

// reviewForwarder forwards UDP and TCP on one 127.0.0.1 port to to; once
// stalled, a TCP chunk from a client carrying "/_edge/purge" is held (the
// peer "hangs" on the purge while its heartbeats keep flowing).
type reviewForwarder struct {
	addr    string
	stall   chan struct{} // closed: hold purges
	arrived chan struct{} // closed when a purge was held
	release chan struct{} // closed: let it go
	once    sync.Once
	relOnce sync.Once
}

func newReviewForwarder(t *testing.T, to string) *reviewForwarder {
	t.Helper()
	var ln net.Listener
	var pc *net.UDPConn
	for i := 0; ; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ua, _ := net.ResolveUDPAddr("udp", l.Addr().String())
		if pc, err = net.ListenUDP("udp", ua); err == nil {
			ln = l
			break
		}
		_ = l.Close()
		if i > 20 {
			t.Fatal(err)
		}
	}
	f := &reviewForwarder{addr: ln.Addr().String(), stall: make(chan struct{}), arrived: make(chan struct{}), release: make(chan struct{})}
	t.Cleanup(func() { f.relOnce.Do(func() { close(f.release) }); _ = ln.Close(); _ = pc.Close() })
	toUDP, _ := net.ResolveUDPAddr("udp", to)
	// UDP: packets from the client go to to; to's answers come back on
	// one upstream socket per client address.
	var mu sync.Mutex
	ups := map[string]*net.UDPConn{}
	go func() {
		buf := make([]byte, 65536)
		for {
			n, from, err := pc.ReadFromUDP(buf)
			if err != nil {
				return
			}
			mu.Lock()
			up := ups[from.String()]
			if up == nil {
				up, err = net.DialUDP("udp", nil, toUDP)
				if err != nil {
					mu.Unlock()
					continue
				}
				ups[from.String()] = up
				go func(up *net.UDPConn, from *net.UDPAddr) {
					b := make([]byte, 65536)
					for {
						n, err := up.Read(b)
						if err != nil {
							return
						}
						_, _ = pc.WriteToUDP(b[:n], from)
					}
				}(up, from)
			}
			mu.Unlock()
			_, _ = up.Write(buf[:n])
		}
	}()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				u, err := net.Dial("tcp", to)
				if err != nil {
					_ = c.Close()
					return
				}
				go func() { _, _ = io.Copy(c, u); _ = c.Close() }()
				b := make([]byte, 32<<10)
				for {
					n, err := c.Read(b)
					if n > 0 {
						select {
						case <-f.stall:
							if bytes.Contains(b[:n], []byte("/_edge/purge")) {
								f.once.Do(func() { close(f.arrived) })
								<-f.release
							}
						default:
						}
						if _, werr := u.Write(b[:n]); werr != nil {
							return
						}
					}
					if err != nil {
						_ = u.Close()
						return
					}
				}
			}()
		}
	}()
	return f
}

// FINDING (medium), node level: an admin purge whose round is under way
// when the node stops, after the shutdown deadline has been used up, is
// owed to the peer it could not reach in memory only. admin.Shutdown(sctx)
// returns at once when sctx has expired (it does not wait for handlers),
// cluster.Close then writes and lets the directory go, and the purge's
// round ends after it: its owe goes nowhere, and the admin client gets 200
// with peers_owed 1 and no error. The next process starts without it, and
// the peer that missed the purge serves the purged page. Here the deadline
// is short (50 ms); in production a public drain that uses the 15 s
// shutdown_timeout up (a long download) does the same.
func TestOwedReviewAPurgeInItsRoundAtShutdownIsWrittenOrReportedNotSaved(t *testing.T) {
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
	written := strings.Contains(string(state), "/review/shutdown")
	if ans.code == http.StatusOK && strings.Contains(ans.body, `"peers_owed":1`) && !written {
		t.Errorf("the admin client was told the purge is owed to 1 peer (200, no error), but the state file does not hold it: the next start forgets it")
	}
	if !written {
		t.Error("a purge in its round at shutdown was owed after cluster.Close: never written")
	}
	// And its answer comes: closing the admin server at the spent deadline
	// (a first version of the stop's Close for requests left, 2026-12-06)
	// cut it while cluster.Close waited for this very round (a review, s20).
	if ans.code == 0 {
		t.Errorf("the admin client got no answer (%s) for a purge cluster.Close waited for and wrote", ans.body)
	}
}

func reviewClusterYAML(t *testing.T, stateDir, admin string) string {
	cl := freeAddr(t)
	return "node_id: a\nlisten: '" + freeAddr(t) + "'\nadmin: {listen: '" + admin + "', token: 'admin-token-0123456789'}\n" +
		"origin: {url: 'http://127.0.0.1:1'}\nshutdown_timeout: 1s\n" +
		"cluster: {listen: '" + cl + "', peers: 'a=" + cl + ",b=127.0.0.1:1', secret: 'a-test-cluster-secret', heartbeat_period: 50ms, state_dir: '" + stateDir + "'}\n"
}

// HELD: a start that fails after cluster.New (its admin address taken)
// lets cluster.state_dir go: the next start in the same process takes it.
func TestOwedReviewAFailedStartLetsTheStateDirGo(t *testing.T) {
	dir := t.TempDir()
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	cfg, err := config.LoadBytes([]byte(reviewClusterYAML(t, dir, taken.Addr().String())))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := New(cfg, slog.New(slog.DiscardHandler)); err == nil || !strings.Contains(err.Error(), "admin.listen") {
		t.Fatalf("a start on a taken admin address: %v", err)
	}
	cfg, err = config.LoadBytes([]byte(reviewClusterYAML(t, dir, freeAddr(t))))
	if err != nil {
		t.Fatal(err)
	}
	n, err := New(cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatalf("the next start after a failed one: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- n.Run(ctx) }()
	cancel()
	<-done
	cfg, _ = config.LoadBytes([]byte(reviewClusterYAML(t, dir, freeAddr(t))))
	n2, err := New(cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatalf("a start after a stopped node: %v", err)
	}
	ctx2, cancel2 := context.WithCancel(context.Background())
	go func() { done <- n2.Run(ctx2) }()
	cancel2()
	<-done
}

// FINDING (low): when Run ends on a serve error (a listener that fails,
// membership that cannot start, a heartbeat socket error) it returns at
// once, without cluster.Close: what is owed and not written yet (the
// monitor's changes are written off its loop, retried next round) is not
// written, and the process keeps cluster.state_dir locked until it exits
// (an embedder, or a supervisor that calls node.New again in-process, is
// refused its own directory).
//
// Since: Run stops on a serve error as on a signal, so the disk tier lets
// its directory go too (its own lock refused the next New before), with
// its index written.
func TestOwedReviewRunEndingOnAServeErrorLetsTheStateDirGo(t *testing.T) {
	dir := t.TempDir()
	diskYAML := "cache: {disk: {path: '" + filepath.Join(t.TempDir(), "disk") + "'}}\n"
	cfg, err := config.LoadBytes([]byte(reviewClusterYAML(t, dir, freeAddr(t)) + diskYAML))
	if err != nil {
		t.Fatal(err)
	}
	n, err := New(cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- n.Run(context.Background()) }()
	deadline := time.Now().Add(15 * time.Second)
	for n.cluster.Pulled() == nil && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	_ = n.admLn.Close() // the admin listener fails
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "node: serve:") {
			t.Fatalf("Run after its admin listener failed: %v, want the serve error", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("Run did not end on its admin listener's failure")
	}
	cfg, _ = config.LoadBytes([]byte(reviewClusterYAML(t, dir, freeAddr(t)) + diskYAML))
	n2, err := New(cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatalf("a start after Run ended on an error: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() { done <- n2.Run(ctx) }()
	cancel()
	<-done
}
