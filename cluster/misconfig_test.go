package cluster

import (
	"bytes"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/edgecache/edge/cluster/wire"
)

// TestMisconfigurationIsLoggedOnceWithTheRemedy: a heartbeat signed with
// another secret is logged, with its sender and the remedy, once however
// many arrive; a peer never heard from is reported after start-up.
func TestMisconfigurationIsLoggedOnceWithTheRemedy(t *testing.T) {
	var out bytes.Buffer
	c := &Cluster{log: slog.New(slog.NewTextHandler(&out, nil)), warned: newMisconfigMemory(),
		cfg: Config{Period: 10 * time.Millisecond}, started: time.Now().Add(-time.Minute),
		peers: map[string]*Peer{"edge-2": {ID: "edge-2", Addr: "127.0.0.1:7947"}, "edge-3": {ID: "edge-3", Addr: "127.0.0.1:7948", seen: true},
			"edge-4": {ID: "edge-4", Addr: "127.0.0.1:7949", added: time.Now()}}} // just learned of: not reported yet
	good, err := wire.Heartbeat{Node: "edge-9", To: "edge-1", Seq: 1, SendNs: time.Now().UnixNano()}.Encode([]byte("their secret"))
	if err != nil {
		t.Fatal(err)
	}
	v := wire.NewVerifier([]byte("our secret"), 5*time.Second, "edge-1")
	from := &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 40000}
	for range 5 {
		_, err := v.Verify(good, time.Now().UnixNano())
		if err == nil {
			t.Fatal("a heartbeat with another secret was accepted")
		}
		c.heartbeatRejected(from, err)
	}
	log := out.String()
	if n := strings.Count(log, "fail authentication"); n != 1 || !strings.Contains(log, "127.0.0.1") || !strings.Contains(log, "same cluster.secret") {
		t.Errorf("want one line naming the sender and the remedy, got %d:\n%s", n, log)
	}
	out.Reset()
	c.checkUnreached(time.Now())
	c.checkUnreached(time.Now())
	log = out.String()
	if strings.Count(log, "no heartbeat since this node learned of it") != 1 || !strings.Contains(log, "edge-2") || strings.Contains(log, "edge-3") {
		t.Errorf("unreached peers:\n%s", log)
	}
}

func TestNodeIDConflictIsLogged(t *testing.T) {
	var out bytes.Buffer
	c := &Cluster{log: slog.New(slog.NewTextHandler(&out, nil)), warned: newMisconfigMemory(), incarnation: 1,
		cfg: Config{NodeID: "edge-1", Period: 10 * time.Millisecond}, peers: map[string]*Peer{}}
	from := &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 40001}
	c.received(wire.Received{Heartbeat: wire.Heartbeat{Node: "edge-1", Incarnation: 1}, From: from}) // our own, looped back
	if out.Len() != 0 {
		t.Fatalf("our own heartbeat was reported: %s", out.String())
	}
	c.received(wire.Received{Heartbeat: wire.Heartbeat{Node: "edge-1", Incarnation: 2}, From: from})
	c.received(wire.Received{Heartbeat: wire.Heartbeat{Node: "edge-1", Incarnation: 2}, From: from})
	if n := strings.Count(out.String(), "this node's id"); n != 1 || !strings.Contains(out.String(), "own node_id") {
		t.Fatalf("want one warning with the remedy, got:\n%s", out.String())
	}
}

// TestRefusedPacketsFromManySourcesAreBounded: junk from thousands of
// addresses (a scan, spoofed UDP) logs a few lines, not one per source.
func TestRefusedPacketsFromManySourcesAreBounded(t *testing.T) {
	var out bytes.Buffer
	c := &Cluster{log: slog.New(slog.NewTextHandler(&out, nil)), warned: newMisconfigMemory()}
	v := wire.NewVerifier([]byte("our secret"), 5*time.Second, "edge-1")
	_, err := v.Verify(make([]byte, 300), time.Now().UnixNano())
	if err == nil {
		t.Fatal("junk accepted")
	}
	for i := range 5000 {
		c.heartbeatRejected(&net.UDPAddr{IP: net.IPv4(203, 0, byte(i>>8), byte(i)), Port: 1024 + i}, err)
	}
	if n := strings.Count(out.String(), "\n"); n > sourcesPerCause || n == 0 {
		t.Errorf("%d lines for junk from 5000 sources, want at most %d", n, sourcesPerCause)
	}
}

// A backlog of heartbeats read at once after this node was paused (SIGSTOP,
// a stalled VM) is refused for its age but is no clock's fault: not
// reported (a new user saw "synchronise the clocks" after a SIGCONT). A
// sender whose clock is off, refused heartbeat after heartbeat for a few
// periods, is, with how far off and which way.
func TestASkewedClockIsReportedAndAPausesBacklogIsNot(t *testing.T) {
	var out bytes.Buffer
	const period = 100 * time.Millisecond
	c := &Cluster{log: slog.New(slog.NewTextHandler(&out, nil)), warned: newMisconfigMemory(), cfg: Config{Period: period}}
	secret := []byte("our secret")
	v := wire.NewVerifier(secret, 5*time.Second, "edge-1")
	refuse := func(from *net.UDPAddr, seq uint64, sent time.Time) {
		t.Helper()
		b, err := wire.Heartbeat{Node: "edge-2", To: "edge-1", Seq: seq, SendNs: sent.UnixNano()}.Encode(secret)
		if err != nil {
			t.Fatal(err)
		}
		_, err = v.Verify(b, time.Now().UnixNano())
		if err == nil {
			t.Fatal("a heartbeat 10 s old was accepted")
		}
		c.heartbeatRejected(from, err)
	}
	paused := &net.UDPAddr{IP: net.IPv4(127, 0, 0, 2), Port: 7947}
	for i := range 60 { // what the socket queued during a 12 s pause (the part over 5 s old), read in a burst
		refuse(paused, uint64(i+1), time.Now().Add(-12*time.Second+time.Duration(i)*100*time.Millisecond))
	}
	if strings.Contains(out.String(), "clock") {
		t.Fatalf("a pause's backlog was reported as a skewed clock:\n%s", out.String())
	}
	skewed := &net.UDPAddr{IP: net.IPv4(127, 0, 0, 3), Port: 7948}
	// A clock 10 s behind: every heartbeat refused, two a period (until
	// reported, or 40: a loaded machine's late wake-up may break a run).
	for i := 0; i < 40 && !strings.Contains(out.String(), "clock too far"); i++ {
		refuse(skewed, uint64(i+1), time.Now().Add(-10*time.Second))
		time.Sleep(period / 2)
	}
	log := out.String()
	if n := strings.Count(log, "clock too far"); n != 1 || !strings.Contains(log, "127.0.0.3") || !strings.Contains(log, "behind this node's clock") {
		t.Errorf("want one line naming the skewed sender, how far and which way:\n%s", log)
	}
}

// TestMisaddressedHeartbeatsAreLogged: an authentic heartbeat addressed
// to another node is refused and logged once with the remedy; one that
// gives this node's id is our own looped back (silent) or a second node
// with our id (the conflict warning), as when it was accepted.
func TestMisaddressedHeartbeatsAreLogged(t *testing.T) {
	var out bytes.Buffer
	c := &Cluster{log: slog.New(slog.NewTextHandler(&out, nil)), warned: newMisconfigMemory(), incarnation: 1,
		cfg: Config{NodeID: "edge-1", Period: 10 * time.Millisecond}, peers: map[string]*Peer{}}
	secret := []byte("our secret")
	v := wire.NewVerifier(secret, 5*time.Second, "edge-1")
	from := &net.UDPAddr{IP: net.IPv4(127, 0, 0, 3), Port: 7000}
	send := func(h wire.Heartbeat) {
		t.Helper()
		h.SendNs = time.Now().UnixNano()
		b, err := h.Encode(secret)
		if err != nil {
			t.Fatal(err)
		}
		_, err = v.Verify(b, time.Now().UnixNano())
		if r, _ := wire.ReasonOf(err); r != wire.RejectReceiver {
			t.Fatalf("%+v: %v, want refused as %s", h, err, wire.RejectReceiver)
		}
		c.heartbeatRejected(from, err)
	}
	for seq := range uint64(3) {
		send(wire.Heartbeat{Node: "edge-1", To: "edge-2", Incarnation: 1, Seq: seq + 1}) // our own, looped back
	}
	if out.Len() != 0 {
		t.Fatalf("our own heartbeat, looped back, was reported: %s", out.String())
	}
	for seq := range uint64(3) {
		send(wire.Heartbeat{Node: "edge-3", To: "edge-2", Incarnation: 1, Seq: seq + 1})
	}
	if log := out.String(); strings.Count(log, "addressed to another node") != 1 || !strings.Contains(log, `addressed to node \"edge-2\"`) || !strings.Contains(log, "cluster.peers") {
		t.Fatalf("want one warning naming the receiver and the remedy, got:\n%s", log)
	}
	out.Reset()
	for seq := range uint64(3) {
		send(wire.Heartbeat{Node: "edge-1", To: "edge-2", Incarnation: 2, Seq: seq + 1}) // a second node with our id
	}
	if n := strings.Count(out.String(), "this node's id"); n != 1 {
		t.Fatalf("want one id conflict warning, got:\n%s", out.String())
	}
}
