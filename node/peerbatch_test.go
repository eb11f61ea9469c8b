package node

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestPeerAnswerInOneWrite: a peer's answer of a few KiB (net/http's full
// 4 KiB buffer, then the body's end and the MAC trailer) leaves the home in
// one write (tuning.write_batching on the cluster listener), and the page
// the client gets through the other node is the origin's, byte for byte.
func TestPeerAnswerInOneWrite(t *testing.T) {
	body := strings.Repeat("0123456789abcdef", 375) // 6,000 bytes
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=600")
		_, _ = io.WriteString(w, r.URL.Path+"\n"+body)
	}))
	defer origin.Close()
	clA, clB := freeAddr(t), freeAddr(t)
	start := func(id, cl string) *Node {
		return startNodeYAML(t, "node_id: "+id+"\nlisten: '"+freeAddr(t)+"'\nadmin: {listen: '"+freeAddr(t)+"'}\n"+
			"origin: {url: '"+origin.URL+"'}\n"+
			"cluster: {listen: '"+cl+"', peers: 'a="+clA+",b="+clB+"', secret: 'a-test-cluster-secret', heartbeat_period: 50ms}\n")
	}
	a, b := start("a", clA), start("b", clB)
	get := func(n *Node, path string) (string, string) {
		t.Helper()
		resp, err := http.Get("http://" + n.PublicAddr() + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		got, _ := io.ReadAll(resp.Body)
		return string(got), resp.Header.Get("Cache-Status")
	}
	forwarded := 0
	deadline := time.Now().Add(20 * time.Second)
	for i := 0; forwarded < 5 && time.Now().Before(deadline); i++ {
		path := fmt.Sprintf("/p/%d", i)
		// Filled through one node, then asked of the other: one of the
		// two is not the page's home, and its answer comes from a peer.
		for _, n := range []*Node{a, b} {
			got, status := get(n, path)
			if got != path+"\n"+body {
				t.Fatalf("%s through %s: %d bytes, not the origin's page (%s)", path, n.cfg.NodeID, len(got), status)
			}
			// A peer's answer carries the peer's own Cache-Status entry
			// before this node's ("b; hit, a; fwd=…").
			if strings.Count(status, "fwd=") == 1 && strings.Contains(status, ", ") {
				forwarded++
			}
		}
	}
	if forwarded < 5 {
		t.Fatalf("only %d answers came from a peer in 20 s", forwarded)
	}
	// A fresh hit answered on the cluster listener's read loop is one
	// vectored write of head and body by construction; every other
	// answer's two writes must have been merged.
	merged := a.peerBatch.merged.Load() + b.peerBatch.merged.Load()
	loop := a.peerHitM.Stats().Answered + b.peerHitM.Stats().Answered
	// Some of them were fresh hits at the home, which its read loop
	// answers: under the origin.url shortcut too, whose site has a name
	// its keys do not carry (every such hit went to net/http until
	// 2026-12-06, found by scripts/peerlatency reading 0 of 301).
	if loop == 0 {
		t.Errorf("%d peer answers, none on a cluster listener's read loop", forwarded)
	}
	if merged+loop < int64(forwarded) {
		t.Errorf("%d peer answers: %d merged writes on the cluster listeners and %d answered on their read loops: want every answer in one write", forwarded, merged, loop)
	}
	if wb := a.Snapshot().WriteBatching; wb == nil || wb.PeerMerged != a.peerBatch.merged.Load() {
		t.Errorf("status page write_batching %+v: want the cluster listener's merged writes (%d)", wb, a.peerBatch.merged.Load())
	}
}

// readOnlyWrapper changes only reads, as the cluster listener's prefixConn
// does, and says which connection writes go to.
type readOnlyWrapper struct{ net.Conn }

func (w readOnlyWrapper) WriteConn() net.Conn { return w.Conn }

// TestBatchConnWritevThroughReadWrapper: net.Buffers sends one writev only
// to the net package's own connection types; through any other it writes
// buffer by buffer. batchConn over a wrapper that changes only reads hands
// its buffers to the *net.TCPConn beneath (a hostile review found the
// cluster listener's "merged" writes were two system calls, counted as one).
func TestBatchConnWritevThroughReadWrapper(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	bc := &batchConn{Conn: readOnlyWrapper{c}, stats: new(batchStats), hold: time.Second, full: plainFull}
	if _, ok := bc.vectored().(*net.TCPConn); !ok {
		t.Fatalf("batchConn writes its buffers to a %T, not the *net.TCPConn beneath", bc.vectored())
	}
	srv, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	if _, err := bc.Write(make([]byte, netHTTPBufferSize)); err != nil {
		t.Fatal(err)
	}
	if _, err := bc.Write([]byte("the rest")); err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(io.LimitReader(srv, netHTTPBufferSize+8))
	if err != nil || len(got) != netHTTPBufferSize+8 || string(got[netHTTPBufferSize:]) != "the rest" {
		t.Fatalf("read %d bytes (%v), want the held buffer and the rest in order", len(got), err)
	}
	if s, m := bc.stats.sends.Load(), bc.stats.merged.Load(); s != 1 || m != 1 {
		t.Errorf("%d sends, %d merged; want one writev for both", s, m)
	}
}
