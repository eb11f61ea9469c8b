package cluster

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edgecache/edge/proxy"
	"github.com/edgecache/edge/routing"
)

// A seventh review's (1). A list collapsed into a purge of everything
// drops the peers its purges' rounds could not reach (owedPurge.away): the
// collapsed entry carries none, and the fold of a later purge into it
// drops that purge's too. A is cut off from B and C while an operator's
// tool purges through A more than owedPerPeer times (each answer says
// peers_owed 2). The A–C link heals, the A–B cut stays (C reaches B). A
// delivers its purge of everything to C naming nobody, so C owes B
// nothing; only A owes B, and A cannot reach it. B keeps the purged page
// for as long as the cut lasts. With one purge (not collapsed) A names B
// to C and C delivers it (a fifth review's
// TestARedeliveredPurgeStillNamesThePeersItsSenderCouldNotReach).
func TestACollapsedPurgeStillNamesThePeersItsSenderCouldNotReach(t *testing.T) {
	nodes := startRealNodes(t, []string{"A", "B", "C"}, routing.ModeHybrid, 2, 50*time.Millisecond, &slowOrigin{})
	a, b, c := nodes["A"], nodes["B"], nodes["C"]
	page := "/cut/page"
	fillAt(t, b, page)
	setTrusted(a, "B", false)
	setTrusted(a, "C", false)
	_, fan, err := a.c.Purge(context.Background(), proxy.PurgeRequest{URL: "http://site.example" + page}, a.ph.Purge)
	if err != nil || fan.Owed != 2 {
		t.Fatalf("purge at A: %+v %v, want owed 2", fan, err)
	}
	for i := range owedPerPeer {
		_, _, _ = a.c.Purge(context.Background(), proxy.PurgeRequest{URL: fmt.Sprintf("http://site.example/cut/other/%d", i)}, a.ph.Purge)
	}
	t.Logf("A owes B %d, C %d", a.c.owed.owedTo("B"), a.c.owed.owedTo("C"))
	// The A–C link heals; A–B stays cut.
	setTrusted(a, "C", true)
	redeliverNow(t, a)
	t.Logf("after A's delivery to C: A owes C %d; C owes B %d", a.c.owed.owedTo("C"), c.c.owed.owedTo("B"))
	for range 3 {
		redeliverNow(t, c)
	}
	if storedAt(b, page) {
		t.Errorf("B still holds %s, purged through A while A was cut off from B and C: A's list for C collapsed and named nobody, so C owes B %d (only A, cut off from B, owes it)",
			page, c.c.owed.owedTo("B"))
	}
}

// A seventh review's (2). purgeIDs.wipeCovers marks a wipe begun before the
// wipe has run, and keeps the mark when the run fails. B, away longer than
// the clock-skew bound, is owed everything by A; A's first delivery fails
// at B without an answer (the run panics: the failure the sixth review's
// TestARepeatAnsweredWhileTheFirstRunIsGoingDoesNotSettleAPurgeThatThenFails
// models), so A keeps it owed and tries again a second later. B now
// answers "0" at once: its "wipe" (the one that failed) began more than
// maxSkew after the purges it covers. A settles; B was never wiped and
// serves the purged page for good.
func TestAFailedWipeDoesNotCoverTheWipeOwed(t *testing.T) {
	nodes := startRealNodes(t, []string{"A", "B"}, routing.ModeHybrid, 2, 50*time.Millisecond, &slowOrigin{})
	a, b := nodes["A"], nodes["B"]
	page := "/wipefail/page"
	fillAt(t, b, page)
	var wipes atomic.Int64
	hookPurge(t, nodes, "B", func(p proxy.PurgeRequest) {
		if p == purgeEverything && wipes.Add(1) == 1 {
			panic(http.ErrAbortHandler) // the first wipe fails, no answer
		}
	})
	setTrusted(a, "B", false)
	_, _, _ = a.c.Purge(context.Background(), proxy.PurgeRequest{URL: "http://site.example" + page}, a.ph.Purge)
	for i := range owedPerPeer {
		_, _, _ = a.c.Purge(context.Background(), proxy.PurgeRequest{URL: fmt.Sprintf("http://site.example/wipefail/other/%d", i)}, a.ph.Purge)
	}
	time.Sleep(maxSkew + 200*time.Millisecond) // B is away a few seconds more
	setTrusted(a, "B", true)
	redeliverNow(t, a) // B's wipe fails
	t.Logf("after the failed delivery: A owes B %d, B ran %d wipes", a.c.owed.owedTo("B"), wipes.Load())
	for range 3 {
		time.Sleep(owedRetry + 50*time.Millisecond)
		redeliverNow(t, a)
	}
	t.Logf("B's purge function saw %d wipes; A owes B %d", wipes.Load(), a.c.owed.owedTo("B"))
	if storedAt(b, page) {
		t.Errorf("B still holds %s: its only wipe failed, and A's retry was answered as covered by that failed wipe (A owes B %d)", page, a.c.owed.owedTo("B"))
	}
}

// A seventh review's (3). returned.go dates a peer's return from when this
// node learnt it (addPeer), restarted (incarnation, seen before) or trusted
// it after a suspicion of returnGap. A peer this node learns while it is
// away (a configured peer, down at this node's start) and never heard
// from is never suspected (it was never trusted) and never "restarted"
// (not seen): when it comes back, more than returnSettle
// after it was learnt, its first trust is no return. E started after an
// operator's purge (E owes B nothing), learnt B while B was away; B comes
// back, E keeps B's purged page at once, before A, which owes B the
// purge, delivers it. A's delivery purges B, not E.
func TestAPeerLearntWhileAwayReturnsWhenFirstTrusted(t *testing.T) {
	nodes := startRealNodes(t, []string{"A", "B", "E"}, routing.ModeHybrid, 2, 100*time.Millisecond, agedOrigin{})
	a, b, e := nodes["A"], nodes["B"], nodes["E"]
	page := pathHomedAt(t, e, "/learnt/", "B", "E")
	fillAt(t, b, page)
	bAddr := e.c.peers["B"].Addr
	// B goes away; E does not know it yet (it started since).
	setTrusted(a, "B", false)
	forgetAt(e, "B")
	_, fan, _ := a.c.Purge(context.Background(), proxy.PurgeRequest{URL: "http://site.example" + page}, a.ph.Purge)
	t.Logf("purge at A: %+v; A owes B %d, E owes B %d", fan, a.c.owed.owedTo("B"), e.c.owed.owedTo("B"))
	ageHolds(e) // B away for more than keepEnded, as in the fourth review's test
	ageHolds(a)
	// E learns B while B is still away, as New leaves a configured peer
	// that is down at start: a member, monitored, untrusted and never
	// suspected (judge passes over an untrusted peer).
	e.c.mu.Lock()
	e.c.addPeer("B", bAddr)
	e.c.peers["B"].member = true
	e.c.mu.Unlock()
	e.c.setView()
	time.Sleep(returnSettle + 200*time.Millisecond) // B is away a while longer
	// B comes back: E hears it (the heartbeat path's setTrust(true)), A
	// trusts it again; A's next monitor round has not run yet.
	e.c.mu.Lock()
	e.c.setTrust(e.c.peers["B"], true)
	back := e.c.peers["B"].returnedAt
	e.c.mu.Unlock()
	e.c.setView()
	setTrusted(a, "B", true)
	t.Logf("E dates B's return %v ago", time.Since(back).Round(time.Millisecond))
	var w *httptest.ResponseRecorder
	for range 2 {
		w = httptest.NewRecorder()
		e.ph.ServeInbound(w, httptest.NewRequest("GET", "http://site.example"+page, nil), proxy.Inbound{})
		e.ph.Wait()
		t.Logf("E's client: %d, Cache-Status %q, Age %q", w.Code, w.Header().Get("Cache-Status"), w.Header().Get("Age"))
	}
	redeliverNow(t, a)
	if storedAt(b, page) {
		t.Fatal("A's owed purge did not reach B")
	}
	time.Sleep(50 * time.Millisecond)
	if storedAt(e, page) {
		t.Errorf("E holds %s, purged while B was away: E learnt B while it was away, and B's first trust at E was not taken as a return (returnedAt %v ago)",
			page, time.Since(back).Round(time.Millisecond))
	}
}

// A seventh review's (2), continued: the mark is also made while the wipe
// runs, so a second owing node's purge of everything (its own id: its list
// began at another purge) is answered "0" at once, before B has wiped
// anything. C settles, takes B back into its routing view, and its
// clients get B's purged page from B's store (the sixth review's 503 for
// a repeat of a running purge, bypassed).
func TestACoveredWipeIsNotAnsweredWhileTheWipeRuns(t *testing.T) {
	nodes := startRealNodes(t, []string{"A", "B", "C"}, routing.ModeHybrid, 2, 50*time.Millisecond, &slowOrigin{})
	a, b, c := nodes["A"], nodes["B"], nodes["C"]
	page := pathHomedAt(t, c, "/wiperun/", "B", "C")
	fillAt(t, b, page)
	release := make(chan struct{})
	var running atomic.Bool
	hookPurge(t, nodes, "B", func(p proxy.PurgeRequest) {
		if p == purgeEverything && running.CompareAndSwap(false, true) {
			<-release // a wipe over a large disk
		}
	})
	setTrusted(a, "B", false)
	setTrusted(c, "B", false)
	// C noticed B's absence one purge earlier than A: its list begins at
	// another purge, and its purge of everything has another id.
	c.c.owed.owe("B", proxy.PurgeRequest{URL: "http://site.example/wiperun/first"}, newPurgeID(), nil, c.c.metrics)
	_, _, _ = a.c.Purge(context.Background(), proxy.PurgeRequest{URL: "http://site.example" + page}, a.ph.Purge)
	for i := range owedPerPeer {
		_, _, _ = a.c.Purge(context.Background(), proxy.PurgeRequest{URL: fmt.Sprintf("http://site.example/wiperun/other/%d", i)}, a.ph.Purge)
	}
	time.Sleep(maxSkew + 200*time.Millisecond)
	setTrusted(a, "B", true)
	setTrusted(c, "B", true)
	a.c.redeliverPurges(context.Background(), time.Now()) // A's wipe begins at B
	waitUntil(t, "B's wipe to begin", running.Load)
	redeliverNow(t, c)
	c.c.setView()
	w := httptest.NewRecorder()
	c.ph.ServeInbound(w, httptest.NewRequest("GET", "http://site.example"+page, nil), proxy.Inbound{})
	c.ph.Wait()
	stillAtB := storedAt(b, page)
	owes := c.c.owed.owedTo("B")
	close(release)
	redeliverNow(t, a)
	t.Logf("while B's wipe ran: C owes B %d; C's client got %d, Cache-Status %q", owes, w.Code, w.Header().Get("Cache-Status"))
	if owes == 0 && stillAtB {
		t.Errorf("C's purge of everything was settled while B's wipe had not begun to remove anything (B still held %s); C's client was served it from B (Cache-Status %q)",
			page, w.Header().Get("Cache-Status"))
	}
}

// A seventh review's (4). A cut between A and B only (each suspects the
// other; C reaches both) while purges go round from C: B takes every one
// of them from C, but A owes each to B (and B to A) by its own view. Past
// owedPerPeer A's list collapses, and when the cut heals A wipes B, which
// missed nothing (and B wipes A). Below the bound, B answers each id as
// taken; the collapsed id is new to it.
func TestACutBetweenTwoNodesDoesNotWipeThemWhenTheyMissedNothing(t *testing.T) {
	nodes := startRealNodes(t, []string{"A", "B", "C"}, routing.ModeHybrid, 2, 50*time.Millisecond, &slowOrigin{})
	a, b, c := nodes["A"], nodes["B"], nodes["C"]
	kept := "/cutpair/kept"
	fillAt(t, b, kept)
	var wipes atomic.Int64
	hookPurge(t, nodes, "B", func(p proxy.PurgeRequest) {
		if p == purgeEverything {
			wipes.Add(1)
		}
	})
	setTrusted(a, "B", false)
	setTrusted(b, "A", false)
	for i := range owedPerPeer + 1 {
		_, fan, err := c.c.Purge(context.Background(), proxy.PurgeRequest{URL: fmt.Sprintf("http://site.example/cutpair/other/%d", i)}, c.ph.Purge)
		if err != nil || fan.Purged != 2 {
			t.Fatalf("purge %d at C: %+v %v", i, fan, err)
		}
	}
	t.Logf("A owes B %d, B owes A %d, C owes B %d", a.c.owed.owedTo("B"), b.c.owed.owedTo("A"), c.c.owed.owedTo("B"))
	setTrusted(a, "B", true)
	setTrusted(b, "A", true)
	redeliverNow(t, a)
	redeliverNow(t, b)
	if wipes.Load() > 0 || !storedAt(b, kept) {
		t.Errorf("B took all %d purges from C, yet A's delivery wiped it %d times (%s, which no purge named, stored: %v)",
			owedPerPeer+1, wipes.Load(), kept, storedAt(b, kept))
	}
}

// wireRelay is a relay on the path to n that copies bytes both ways,
// keeps the latest purge request it saw (raw), and alters it if asked.
type wireRelay struct {
	ln       net.Listener
	mu       sync.Mutex
	captured []byte
	alter    atomic.Bool
}

func startWireRelay(t *testing.T, n *realNode) *wireRelay {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	r := &wireRelay{ln: ln}
	to := strings.TrimPrefix(n.srv.URL, "http://")
	go func() {
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("tcp", to)
			if err != nil {
				in.Close()
				continue
			}
			go func() { _, _ = io.Copy(in, out); in.Close() }()
			go func() {
				buf := make([]byte, 64<<10)
				capturing := false
				for {
					k, err := in.Read(buf)
					if k > 0 {
						chunk := buf[:k]
						switch {
						case bytes.HasPrefix(chunk, []byte("POST /_edge/purge")):
							capturing = true
							r.mu.Lock()
							r.captured = bytes.Clone(chunk)
							r.mu.Unlock()
							if r.alter.Load() {
								chunk = bytes.Replace(chunk, []byte("kept"), []byte("kepX"), 1)
							}
						case capturing && (bytes.HasPrefix(chunk, []byte("POST ")) || bytes.HasPrefix(chunk, []byte("GET "))):
							capturing = false
						case capturing:
							// The rest of the request (a purge of everything's
							// body of ids may come in several reads: replaying the
							// first alone left the receiver waiting for its body).
							r.mu.Lock()
							r.captured = append(r.captured, chunk...)
							r.mu.Unlock()
						}
						_, _ = out.Write(chunk)
					}
					if err != nil {
						out.Close()
						return
					}
				}
			}()
		}
	}()
	return r
}

// replayTo sends the captured purge's bytes, as they were, to n and
// returns its status line.
func (r *wireRelay) replayTo(t *testing.T, n *realNode) string {
	t.Helper()
	r.mu.Lock()
	raw := bytes.Clone(r.captured)
	r.mu.Unlock()
	conn, err := net.Dial("tcp", strings.TrimPrefix(n.srv.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_, _ = conn.Write(raw)
	_ = conn.SetReadDeadline(time.Now().Add(3 * time.Second))
	line, _ := bufio.NewReader(conn).ReadString('\n')
	return strings.TrimSpace(line)
}

// A seventh review's (5). A peer request's MAC covers its Host, but no
// node checks that the Host (or anything signed) names itself, and each
// node remembers only the nonces it took: a request captured on the wire
// is accepted once by every other node within the skew window. An
// on-path attacker without the secret who sees a purge of everything
// delivered to a returning peer B (a collapsed list) replays it to C,
// which wipes its whole cache: the id is new to C, and C began no wipe.
func TestAPurgeCapturedOnTheWayToOneNodeIsRefusedByAnother(t *testing.T) {
	nodes := startRealNodes(t, []string{"A", "B", "C"}, routing.ModeHybrid, 2, 50*time.Millisecond, &slowOrigin{})
	a, c := nodes["A"], nodes["C"]
	kept := "/replay/kept"
	fillAt(t, c, kept)
	relay := startWireRelay(t, nodes["B"])
	a.c.mu.Lock()
	a.c.peers["B"].Addr = relay.ln.Addr().String()
	a.c.mu.Unlock()
	setTrusted(a, "B", false)
	for i := range owedPerPeer + 1 {
		a.c.owed.owe("B", proxy.PurgeRequest{URL: fmt.Sprintf("http://site.example/replay/other/%d", i)}, newPurgeID(), nil, a.c.metrics)
	}
	setTrusted(a, "B", true)
	redeliverNow(t, a) // B takes its purge of everything, through the relay
	if a.c.owed.owedTo("B") != 0 {
		t.Fatalf("A owes B %d after delivery", a.c.owed.owedTo("B"))
	}
	got := relay.replayTo(t, c)
	t.Logf("the captured purge of everything replayed to C: %q; C holds %s: %v", got, kept, storedAt(c, kept))
	if !strings.Contains(got, "403") || !storedAt(c, kept) {
		t.Errorf("C took a purge of everything captured on its way from A to B (%q): its cache was wiped (%s stored: %v)", got, kept, storedAt(c, kept))
	}
}

// What held: a captured purge replayed to the node it was for is refused
// (nonce), and one altered on the way is refused unsigned, so its sender
// owes it (it is not taken as "refused for good").
func TestAReplayedOrAlteredPeerPurgeIsRefused(t *testing.T) {
	nodes := startRealNodes(t, []string{"A", "B"}, routing.ModeHybrid, 2, 50*time.Millisecond, &slowOrigin{})
	a, b := nodes["A"], nodes["B"]
	fillAt(t, b, "/wire/kept")
	relay := startWireRelay(t, b)
	a.c.mu.Lock()
	a.c.peers["B"].Addr = relay.ln.Addr().String()
	a.c.mu.Unlock()
	_, fan, _ := a.c.Purge(context.Background(), proxy.PurgeRequest{URL: "http://site.example/wire/gone"}, a.ph.Purge)
	if fan.Purged != 1 {
		t.Fatalf("purge through the relay: %+v", fan)
	}
	if got := relay.replayTo(t, b); !strings.Contains(got, "403") {
		t.Errorf("a purge replayed to its node: %q", got)
	}
	relay.alter.Store(true)
	_, fan, _ = a.c.Purge(context.Background(), proxy.PurgeRequest{URL: "http://site.example/wire/kept"}, a.ph.Purge)
	t.Logf("altered purge: %+v; A owes B %d", fan, a.c.owed.owedTo("B"))
	if fan.Owed != 1 || a.c.owed.owedTo("B") != 1 || !storedAt(b, "/wire/kept") {
		t.Errorf("a purge altered on the way to B: %+v, A owes B %d, B still holds it: %v", fan, a.c.owed.owedTo("B"), storedAt(b, "/wire/kept"))
	}
}
