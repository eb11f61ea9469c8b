package cluster

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/edgecache/edge/proxy"
)

// BenchmarkPeerLoopHit is a signed climb for a 4 KiB page the home holds
// fresh, over a real loopback connection, answered on its cluster
// listener's read loop (peerhit.go: loop) or, for comparison, by net/http
// and PeerHandler (net_http): the home's whole cost of a peer hit, plus the
// round trip. The requests are signed before the timer starts (each
// nonce is good once).
//
//	go test ./cluster -run '^$' -bench PeerLoopHit -benchmem
func BenchmarkPeerLoopHit(b *testing.B) {
	b.Run("loop", func(b *testing.B) { benchPeerHit(b, true) })
	b.Run("net_http", func(b *testing.B) { benchPeerHit(b, false) })
}

func benchPeerHit(b *testing.B, loop bool) {
	home, ph, p, plain, in := peerHitHome(b, proxy.DefaultConfig(), func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=600")
		w.Header().Set("Content-Type", "text/plain")
		_, _ = io.WriteString(w, strings.Repeat("x", 4096))
	})
	signedGet(b, in, p, "GET", "/page", "climb")
	ph.Wait()
	reqs := make([][]byte, b.N)
	for i := range reqs {
		reqs[i] = rawPeerRequest(b, in, "/page", "X-Forwarded-For", "192.0.2.1", "Accept-Encoding", "gzip")
	}
	addr := p.Addr
	if !loop {
		addr = plain.Addr
	}
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	br := bufio.NewReader(conn)
	before := loopHits(home)
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		if _, err := conn.Write(reqs[i]); err != nil {
			b.Fatal(err)
		}
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			b.Fatalf("status %d", resp.StatusCode)
		}
	}
	b.StopTimer()
	if got, want := loopHits(home)-before, map[bool]int{true: b.N}[loop]; got != want {
		b.Fatalf("%d of %d answered on the read loop, want %d", got, b.N, want)
	}
}
