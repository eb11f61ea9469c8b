package cluster

import (
	"context"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// s21Recorder keeps what a node wrote on each membership stream it
// opened: the ciphertext a stranger on the path (a sniffer, a switch port
// mirror, a compromised router) sees, without knowing cluster.secret.
type s21Recorder struct {
	inner   func(ctx context.Context, addr string) (net.Conn, error) // nil: TCP
	mu      sync.Mutex
	streams [][]byte
}

type s21RecConn struct {
	net.Conn
	r *s21Recorder
	i int
}

func (c *s21RecConn) Write(b []byte) (int, error) {
	c.r.mu.Lock()
	c.r.streams[c.i] = append(c.r.streams[c.i], b...)
	c.r.mu.Unlock()
	return c.Conn.Write(b)
}

func (r *s21Recorder) dial(ctx context.Context, addr string) (net.Conn, error) {
	dial := r.inner
	if dial == nil {
		var d net.Dialer
		dial = func(ctx context.Context, addr string) (net.Conn, error) { return d.DialContext(ctx, "tcp", addr) }
	}
	c, err := dial(ctx, addr)
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.streams = append(r.streams, nil)
	return &s21RecConn{Conn: c, r: r, i: len(r.streams) - 1}, nil
}

func (r *s21Recorder) first() []byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.streams) == 0 {
		return nil
	}
	return append([]byte(nil), r.streams[0]...)
}

// Found by session 21's review, now mended: a stranger who does not know
// cluster.secret revived a departed member by replaying a captured
// membership stream (memberlist's AES-GCM has no replay protection; edge
// added it to the ring, the status page and the metrics until probes
// declared it dead again, and the stranger could repeat it at will). The
// review showed it on real sockets (c's join stream recorded, c stopped,
// the bytes sent again 36 s later); this is the same in virtual time on
// the in-memory network, waiting out what real time cannot afford:
// memberlist's gossipToTheDead (55 s), after which only freshAlive
// (stamped metadata, refreshed every metaRefresh) stands between a replay
// and a revived member. The refusal must be freshAlive's (counted stale).
// Without it the test reads "brought r09 back: on r00's member table true,
// on its ring true".
func TestAReplayedJoinStreamIsRefusedOnceMemberlistForgotTheNode(t *testing.T) {
	virtualTime(t, func(t *testing.T) {
		ids, addrs, nodes := startGossipNodes(t, "r", 2, 1, func(c *Config) { c.Monitoring = MonitorAll })
		defer stopAll(nodes)
		eventually(t, 30*time.Second, "the two trust each other", allTrust(nodes, ids))
		a := nodes["r00"]
		rec := &s21Recorder{}
		c := startGossipNode(t, "r09", map[string]string{"r00": addrs["r00"]}, listenUDP(t, "127.0.0.1:0"), 1, func(cfg *Config) {
			cfg.Monitoring = MonitorAll
			rec.inner = cfg.GossipDial
			cfg.GossipDial = rec.dial
		})
		eventually(t, 30*time.Second, "r09 joins", func() bool { return a.member("r09") })
		captured := rec.first()
		if len(captured) < 100 {
			t.Fatalf("captured only %d bytes of r09's join stream", len(captured))
		}
		c.stop()
		eventually(t, 30*time.Second, "r09 leaves", func() bool { return !a.member("r09") })
		time.Sleep(gossipToTheDead + 10*time.Second) // memberlist forgets it
		s, err := networkOf(t).DialStream("127.0.0.1:1", addrs["r00"])
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			_ = s.SetDeadline(time.Now().Add(5 * time.Second))
			_, _ = s.Write(captured)
			_, _ = io.Copy(io.Discard, s)
		}()
		// Watched throughout: memberlist's probes find r09 dead again
		// within seconds of a revival.
		listed, member := false, false
		for range 120 {
			for _, m := range a.c.MembershipDetail().Members {
				listed = listed || m.ID == "r09"
			}
			member = member || a.member("r09")
			time.Sleep(50 * time.Millisecond)
		}
		_ = s.Close()
		if listed || member {
			t.Errorf("the replayed stream brought r09 back: on r00's member table %v, on its ring %v", listed, member)
		}
		if got := testutil.ToFloat64(a.c.metrics.GossipRejected.WithLabelValues("stale")); got == 0 {
			t.Error("no stale announcement counted: the replay was not what freshAlive refused")
		}
	})
}
