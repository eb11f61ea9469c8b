package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/edgecache/edge/proxy"
	"github.com/edgecache/edge/routing"
)

// linkRealNodes makes n and m peers of long standing, as
// startRealNodesWith does.
func linkRealNodes(n, m *realNode) {
	for _, x := range [][2]*realNode{{n, m}, {m, n}} {
		a, b := x[0], x[1]
		a.c.mu.Lock()
		if p := a.c.peers[b.id]; p != nil {
			p.Addr = strings.TrimPrefix(b.srv.URL, "http://")
		} else {
			a.c.addPeer(b.id, strings.TrimPrefix(b.srv.URL, "http://"))
		}
		a.c.peers[b.id].trusted, a.c.peers[b.id].member = true, true
		a.c.peers[b.id].returnedAt = time.Time{}
		a.c.mu.Unlock()
		a.c.setView()
	}
}

// A purge owed to a peer that was away outlives a restart of the node that
// owes it: B is down during a purge at A, A restarts before B is back, and
// B, back, loses the purged page. Before, what A owed lived in its memory
// only, and B served the purged page for as long as it stayed fresh.
func TestAnOwedPurgeOutlivesARestartOfTheNodeThatOwesIt(t *testing.T) {
	dir := t.TempDir()
	nt := nodeTuning{stateDir: dir}
	nodes := startRealNodesWith(t, []string{"A", "B"}, routing.ModeHybrid, 2, 100*time.Millisecond, &slowOrigin{}, 1000, nt)
	a, b := nodes["A"], nodes["B"]
	fillAt(t, b, "/restart/1")
	setTrusted(a, "B", false) // B is down
	_, fan, err := a.c.Purge(context.Background(), proxy.PurgeRequest{URL: "http://site.example/restart/1"}, a.ph.Purge)
	if err != nil || fan.Owed != 1 {
		t.Fatalf("a purge with B away: %+v, %v; want owed 1", fan, err)
	}
	// A restarts: a new process, the same state_dir (the old one's end
	// lets the directory go, as a process's exit does).
	if err := a.c.Close(); err != nil {
		t.Fatal(err)
	}
	a2 := newRealNode(t, "A", routing.ModeHybrid, 2, 100*time.Millisecond, &slowOrigin{}, 1000, nt)
	if n := a2.c.owed.owedTo("B"); n != 1 {
		t.Fatalf("after A's restart it owes B %d purges, want 1", n)
	}
	linkRealNodes(a2, b) // B is back, and A learns it
	if slices.Contains(rankingOf(a2, "/restart/1"), "B") {
		t.Error("A routes to B while it owes it a purge")
	}
	redeliverNow(t, a2)
	if storedAt(b, "/restart/1") {
		t.Error("B still holds the page purged while it was down, after A restarted and met it again")
	}
	if n := a2.c.owed.owedTo("B"); n != 0 {
		t.Errorf("after the delivery A owes B %d purges", n)
	}
	// What was delivered is written too: a second restart owes nothing.
	if err := a2.c.Close(); err != nil {
		t.Fatal(err)
	}
	a3 := newRealNode(t, "A", routing.ModeHybrid, 2, 100*time.Millisecond, &slowOrigin{}, 1000, nt)
	if n := a3.c.owed.owedTo("B"); n != 0 {
		t.Errorf("after a second restart A owes B %d purges it delivered", n)
	}
}

// The state file keeps every field a delivery needs: the purge, its id,
// the peers its round missed, and for a purge of everything when it was
// owed and what it stands for (null and [] apart); a forgotten id stays
// forgotten, an id in the table counts as forgotten until it is back.
func TestOwedStateRoundTrips(t *testing.T) {
	dir := t.TempDir()
	var o owedPurges
	if err := o.loadOwed(dir, time.Now()); err != nil {
		t.Fatal(err)
	}
	m := NewMetrics(prometheus.NewRegistry())
	o.owe("B", proxy.PurgeRequest{URL: "http://site.example/a", Soft: true}, newPurgeID(), []string{"C", "D"}, m)
	o.owe("B", proxy.PurgeRequest{Tag: "t1"}, newPurgeID(), nil, m)
	for i := range owedPerPeer + 1 { // collapses into a purge of everything
		o.owe("C", proxy.PurgeRequest{Prefix: "/p/" + string(rune('a'+i%26))}, newPurgeID(), []string{"D"}, m)
	}
	forgotAt := time.Now().Add(-time.Hour).Truncate(time.Second)
	o.owe("E", proxy.PurgeRequest{Prefix: "http://site.example/x/"}, newPurgeID(), nil, m)
	o.forgot("E", forgotAt)
	if err := o.closeState(); err != nil { // written, and the directory let go
		t.Fatal(err)
	}
	loadedAt := time.Now()
	var o2 owedPurges
	if err := o2.loadOwed(dir, loadedAt); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"B", "C", "E"} {
		l, l2 := o.byPeer[id], o2.byPeer[id]
		if l2 == nil || len(l2.purges) != len(l.purges) {
			t.Fatalf("%s: %d purges before, %+v after", id, len(l.purges), l2)
		}
		for i, x := range l.purges {
			y := l2.purges[i]
			if x.p != y.p || x.pid != y.pid || !slices.Equal(x.away, y.away) || !x.covers.Equal(y.covers) ||
				!slices.Equal(x.stands, y.stands) || (x.stands == nil) != (y.stands == nil) {
				t.Errorf("%s purge %d: %+v before, %+v after", id, i, x, y)
			}
		}
		if len(l.pids) != len(l2.pids) {
			t.Errorf("%s: %d ids before, %d after", id, len(l.pids), len(l2.pids))
		}
	}
	if e := o2.byPeer["C"].purges[0]; e.p != purgeEverything || e.stands == nil || len(e.stands) != owedPerPeer+1 {
		t.Errorf("C's collapsed list: %+v, want a purge of everything standing for %d purges", e.p, owedPerPeer+1)
	}
	if got := o2.byPeer["E"].forgotten; !got.Equal(forgotAt) {
		t.Errorf("E forgotten at %v after the load, want %v", got, forgotAt)
	}
	if got := o2.byPeer["B"].forgotten; !got.Equal(loadedAt) {
		t.Errorf("B (in the table) forgotten at %v after the load, want the load's time %v until it is back", got, loadedAt)
	}
	if o2.count() != o.count() || !o2.any.Load() {
		t.Errorf("count %d after the load, %d before", o2.count(), o.count())
	}
	// Numbers are new and distinct: a settle names one purge.
	seqs := map[uint64]bool{}
	for _, l := range o2.byPeer {
		for _, x := range l.purges {
			if x.seq == 0 || seqs[x.seq] {
				t.Fatalf("purge numbers after the load repeat or are 0: %d", x.seq)
			}
			seqs[x.seq] = true
		}
	}
}

// A state file that is not one stops the start with its name and the
// reason, and is left where it is (nothing it holds is lost).
func TestABadOwedStateFileStopsTheStart(t *testing.T) {
	pid := strings.Repeat("ab", 12)
	for _, tc := range []struct{ name, doc, want string }{
		{"not json", "{", "not an owed-purges document"},
		{"empty", "", "not an owed-purges document"},
		{"trailing data", `{"version":1,"peers":{}} {}`, "data after it"},
		{"version", `{"version":2,"peers":{}}`, "version 2"},
		{"unknown field", `{"version":1,"peers":{},"x":1}`, "unknown field"},
		{"empty peer id", `{"version":1,"peers":{"":{"purges":[]}}}`, "peer id"},
		{"purge naming nothing", `{"version":1,"peers":{"B":{"purges":[{"pid":"` + pid + `"}]}}}`, "exactly one of"},
		{"purge naming two", `{"version":1,"peers":{"B":{"purges":[{"url":"http://a.example/","tag":"t","pid":"` + pid + `"}]}}}`, "exactly one of"},
		{"relative url", `{"version":1,"peers":{"B":{"purges":[{"url":"/a","pid":"` + pid + `"}]}}}`, "absolute"},
		{"bad pid", `{"version":1,"peers":{"B":{"purges":[{"tag":"t","pid":"xyz"}]}}}`, "hex of 24"},
		{"bad pids entry", `{"version":1,"peers":{"B":{"pids":["zz"],"purges":[]}}}`, "hex of 24"},
		{"stands on a tag purge", `{"version":1,"peers":{"B":{"purges":[{"tag":"t","pid":"` + pid + `","stands":[]}]}}}`, "not a purge of everything"},
		{"bad stood-for id", `{"version":1,"peers":{"B":{"purges":[{"prefix":"/","pid":"` + pid + `","stands":["q"]}]}}}`, "stood-for id"},
		{"empty away id", `{"version":1,"peers":{"B":{"purges":[{"tag":"t","pid":"` + pid + `","away":[""]}]}}}`, "away id"},
		{"wrong type", `{"version":1,"peers":{"B":{"purges":{}}}}`, "not an owed-purges document"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, owedFile)
			if err := os.WriteFile(path, []byte(tc.doc), 0o600); err != nil {
				t.Fatal(err)
			}
			var o owedPurges
			err := o.loadOwed(dir, time.Now())
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "cluster.state_dir") {
				t.Fatalf("load of %q: %v, want an error naming cluster.state_dir, %s and %q", tc.doc, err, path, tc.want)
			}
			if b, _ := os.ReadFile(path); string(b) != tc.doc {
				t.Error("the bad file was changed")
			}
		})
	}
}

// FuzzDecodeOwed: any bytes give an error or lists that encode and decode
// to the same document.
func FuzzDecodeOwed(f *testing.F) {
	pid := strings.Repeat("ab", 12)
	f.Add([]byte(`{"version":1,"peers":{"B":{"pids":["` + pid + `"],"purges":[{"url":"http://a.example/x","pid":"` + pid + `","away":["C"],"stands":null}]}}}`))
	f.Add([]byte(`{"version":1,"peers":{"C":{"forgotten":"2026-12-05T10:00:00Z","purges":[{"prefix":"/","pid":"` + pid + `","covers":"2026-12-05T09:00:00Z","stands":[]}]}}}`))
	f.Add([]byte(`{}`))
	now := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, b []byte) {
		lists, err := decodeOwed(b, now)
		if err != nil {
			return
		}
		o := owedPurges{byPeer: lists}
		enc := o.encodeLocked()
		again, err := decodeOwed(enc, now)
		if err != nil {
			t.Fatalf("a decoded document does not decode again: %v\n%s", err, enc)
		}
		o2 := owedPurges{byPeer: again}
		if enc2 := o2.encodeLocked(); string(enc2) != string(enc) {
			t.Fatalf("not stable:\n%s\n%s", enc, enc2)
		}
	})
}

// A state directory the node cannot write stops the start, naming the key,
// rather than the first purge's record.
func TestAStateDirThatCannotBeWrittenStopsTheStart(t *testing.T) {
	if os.Geteuid() == 0 {
		// root writes through the mode bits: a file in the way instead.
		dir := t.TempDir()
		blocker := filepath.Join(dir, "file")
		if err := os.WriteFile(blocker, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		var o owedPurges
		if err := o.loadOwed(filepath.Join(blocker, "state"), time.Now()); err == nil || !strings.Contains(err.Error(), "cluster.state_dir") {
			t.Fatalf("a state_dir under a file: %v, want an error naming cluster.state_dir", err)
		}
		return
	}
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o500); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.Chmod(dir, 0o700) })
	var o owedPurges
	if err := o.loadOwed(dir, time.Now()); err == nil || !strings.Contains(err.Error(), "cluster.state_dir") {
		t.Fatalf("a read-only state_dir: %v, want an error naming cluster.state_dir", err)
	}
}

// A review's (1): a purge sent while more than sendersAwayMax members are
// away (a zone down before memberlist agrees it died) was owed with every
// one of them named, a file the next start refused. What is owed names at
// most sendersAwayMax, as a delivery sends.
func TestAPurgeWithManyPeersAwayIsOwedInAFileThatLoads(t *testing.T) {
	dir := t.TempDir()
	nodes := startRealNodesWith(t, []string{"A", "B"}, routing.ModeHybrid, 2, 100*time.Millisecond, &slowOrigin{}, 1000, nodeTuning{stateDir: dir})
	a := nodes["A"]
	a.c.mu.Lock()
	for i := range sendersAwayMax + 1 {
		id := fmt.Sprintf("Z%02d", i)
		a.c.addPeer(id, "127.0.0.1:1")
		a.c.peers[id].member, a.c.peers[id].trusted = true, false
	}
	a.c.mu.Unlock()
	setTrusted(a, "B", false)
	if _, fan, err := a.c.Purge(context.Background(), proxy.PurgeRequest{URL: "http://site.example/zone/1"}, a.ph.Purge); err != nil || fan.Owed != sendersAwayMax+2 {
		t.Fatalf("purge: %+v, %v; want owed to %d", fan, err, sendersAwayMax+2)
	}
	if err := a.c.Close(); err != nil { // A's end: the directory is the next start's
		t.Fatal(err)
	}
	var o owedPurges
	if err := o.loadOwed(filepath.Join(dir, "A"), time.Now()); err != nil {
		t.Fatalf("the file A wrote for a purge with %d members away does not load: %v", sendersAwayMax+2, err)
	}
	if o.count() != sendersAwayMax+2 {
		t.Errorf("%d purges owed after the load, want %d", o.count(), sendersAwayMax+2)
	}
}

// A review's (2): a signed purge without an id (a sender from before purge
// ids, in a rolling upgrade) is owed on by the receiver under the id "",
// which the loader refused.
func TestAPurgeWithoutAnIdIsOwedInAFileThatLoads(t *testing.T) {
	dir := t.TempDir()
	nodes := startRealNodesWith(t, []string{"A", "B", "C"}, routing.ModeHybrid, 2, 100*time.Millisecond, &slowOrigin{}, 1000, nodeTuning{stateDir: dir})
	a, b := nodes["A"], nodes["B"]
	setTrusted(b, "C", false)
	req, _ := http.NewRequestWithContext(context.Background(), http.MethodPost, b.srv.URL+"/_edge/purge?url=http%3A%2F%2Fsite.example%2Fold%2F1", nil)
	resp, err := a.c.doWith(req, "B", a.c.purgeHTTP, a.c.purgeTLS)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || b.c.owed.owedTo("C") != 1 {
		t.Fatalf("B answered %d and owes C %d, want 200 and 1", resp.StatusCode, b.c.owed.owedTo("C"))
	}
	if err := b.c.Close(); err != nil { // B's end: the directory is the next start's
		t.Fatal(err)
	}
	var o owedPurges
	if err := o.loadOwed(filepath.Join(dir, "B"), time.Now()); err != nil {
		t.Fatalf("B's file after a purge without an id does not load: %v", err)
	}
	if o.count() != 1 {
		t.Errorf("%d purges owed after the load, want 1", o.count())
	}
}

// A review's (3): when what is owed cannot be written (state_dir's disk
// full, gone, remounted read-only), the purge's answer said nothing: the
// operator believed it outlived a restart. It is now reported (NotSaved,
// a 500 from the admin API).
func TestAPurgeWhoseOwedRecordWasNotWrittenSaysSo(t *testing.T) {
	dir := t.TempDir()
	nodes := startRealNodesWith(t, []string{"A", "B"}, routing.ModeHybrid, 2, 100*time.Millisecond, &slowOrigin{}, 1000, nodeTuning{stateDir: dir})
	a := nodes["A"]
	setTrusted(a, "B", false)
	if err := os.RemoveAll(filepath.Join(dir, "A")); err != nil { // the writes now fail
		t.Fatal(err)
	}
	_, fan, err := a.c.Purge(context.Background(), proxy.PurgeRequest{URL: "http://site.example/lost/1"}, a.ph.Purge)
	if err != nil {
		t.Fatal(err)
	}
	if _, saveErrs := a.c.OwedState(); fan.NotSaved == nil || saveErrs == 0 {
		t.Errorf("owed %d, %d failed writes, and the answer's NotSaved is %v", fan.Owed, saveErrs, fan.NotSaved)
	}
}

// A crash mid-write leaves a temporary file beside the state file; the
// next start removes it and reads the state file.
func TestTemporaryFilesACrashLeftAreRemovedAtStart(t *testing.T) {
	dir := t.TempDir()
	left := filepath.Join(dir, "."+owedFile+".12345")
	if err := os.WriteFile(left, []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	var o owedPurges
	if err := o.loadOwed(dir, time.Now()); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(left); !os.IsNotExist(err) {
		t.Errorf("the temporary file a crash left is still there: %v", err)
	}
}

// FuzzOwedStateLoadsWhatItWrites: whatever purges are owed (ids or none,
// long away lists, lists collapsed to everything, forgotten ids), the file
// written is one the next start loads, owing the same (the decoder fuzz
// above only round-trips what already decodes, and missed two such
// files: a review's).
func FuzzOwedStateLoadsWhatItWrites(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 200, 201, 40, 7})
	f.Add(bytes.Repeat([]byte{5, 33}, 300))
	m := NewMetrics(prometheus.NewRegistry())
	f.Fuzz(func(t *testing.T, ops []byte) {
		dir := t.TempDir()
		var o owedPurges
		if err := o.loadOwed(dir, time.Now()); err != nil {
			t.Fatal(err)
		}
		for i := 0; i+1 < len(ops) && i < 2000; i += 2 {
			op, arg := ops[i], int(ops[i+1])
			peer := string(rune('A' + op%4))
			switch {
			case op >= 250:
				o.forgot(peer, time.Now())
			default:
				var away []string
				for k := range arg % 48 {
					away = append(away, fmt.Sprintf("N%02d", k))
				}
				pid := newPurgeID()
				if op%7 == 0 {
					pid = "" // a sender from before purge ids
				}
				p := proxy.PurgeRequest{URL: fmt.Sprintf("http://site.example/%d", arg)}
				switch op % 3 {
				case 1:
					p = proxy.PurgeRequest{Tag: fmt.Sprintf("t%d", arg)}
				case 2:
					p = proxy.PurgeRequest{Prefix: "/"}
				}
				o.owe(peer, p, pid, away, m)
			}
		}
		if err := o.closeState(); err != nil {
			t.Fatal(err)
		}
		var again owedPurges
		if err := again.loadOwed(dir, time.Now()); err != nil {
			t.Fatalf("the file written does not load: %v", err)
		}
		if again.count() != o.count() {
			t.Fatalf("%d owed after the load, %d before", again.count(), o.count())
		}
		_ = again.closeState()
	})
}

// Two processes given one state_dir would each overwrite the other's
// record of what is owed, and one of them would forget a purge at its
// next write: the second stops at its start, naming the key and the
// directory, and starts once the first has let the directory go. A start
// that fails lets it go too.
func TestAStateDirInUseStopsASecondStart(t *testing.T) {
	dir := t.TempDir()
	var first owedPurges
	if err := first.loadOwed(dir, time.Now()); err != nil {
		t.Fatal(err)
	}
	var second owedPurges
	err := second.loadOwed(dir, time.Now())
	if err == nil || !strings.Contains(err.Error(), "cluster.state_dir") || !strings.Contains(err.Error(), "another process holds it") {
		t.Fatalf("a second start on a directory in use: %v, want cluster.state_dir in use", err)
	}
	first.owe("B", proxy.PurgeRequest{URL: "http://site.example/a"}, newPurgeID(), nil, nil)
	if err := first.closeState(); err != nil {
		t.Fatal(err)
	}
	// Nothing is written after the close: a change then stays in memory,
	// and says so (a purge making it answers it unwritten), and the next
	// process reads what the first wrote at its close.
	first.owe("B", proxy.PurgeRequest{URL: "http://site.example/b"}, newPurgeID(), nil, nil)
	if err := first.flush(true); !errors.Is(err, errStateClosed) {
		t.Fatalf("a change after the close: flush says %v, want errStateClosed", err)
	}
	if err := second.loadOwed(dir, time.Now()); err != nil {
		t.Fatalf("once the first let the directory go: %v", err)
	}
	if n := second.owedTo("B"); n != 1 {
		t.Errorf("the next process owes B %d purges, want the 1 written before the close", n)
	}
	_ = second.closeState()

	// A start stopped by a file it cannot read holds nothing afterwards.
	bad := t.TempDir()
	if err := os.WriteFile(filepath.Join(bad, owedFile), []byte("{not json"), 0o600); err != nil {
		t.Fatal(err)
	}
	var refused owedPurges
	if err := refused.loadOwed(bad, time.Now()); err == nil {
		t.Fatal("a malformed state file started")
	}
	if err := os.WriteFile(filepath.Join(bad, owedFile), []byte("{}"), 0o600); err != nil {
		t.Fatal(err)
	}
	var next owedPurges
	if err := next.loadOwed(bad, time.Now()); err != nil && strings.Contains(err.Error(), "in use") {
		t.Fatalf("a failed start kept the directory: %v", err)
	}
	_ = next.closeState()
}

// After the close only a purge owed is reported unwritten: one settled
// then (a late answer, a delivery) is not, since the file owing it still
// costs only a redelivery the peer answers at once (a review found every
// purge answering "not saved" once anything changed after the close).
func TestASettleAfterTheCloseIsNotReportedUnwritten(t *testing.T) {
	dir := t.TempDir()
	var o owedPurges
	if err := o.loadOwed(dir, time.Now()); err != nil {
		t.Fatal(err)
	}
	seq := o.owe("B", proxy.PurgeRequest{URL: "http://site.example/s"}, newPurgeID(), nil, nil)
	if err := o.closeState(); err != nil {
		t.Fatal(err)
	}
	o.settle("B", seq)
	if err := o.flush(true); err != nil {
		t.Errorf("a settle after the close: flush says %v, want nil", err)
	}
	o.owe("C", proxy.PurgeRequest{URL: "http://site.example/t"}, newPurgeID(), nil, nil)
	if err := o.flush(true); !errors.Is(err, errStateClosed) {
		t.Errorf("a purge owed after the close: flush says %v, want errStateClosed", err)
	}
}
