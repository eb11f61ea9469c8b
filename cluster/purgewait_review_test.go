package cluster

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edgecache/edge/proxy"
	"github.com/edgecache/edge/routing"
)

// A review's: B runs a delivered purge (pid) slowly; another node's
// delivery of the same pid waits in the handler's poll loop; its sender
// gives up (its bound, the asker's pullBound). The waiting handler ends
// with the request: a purge of everything's waiter did not (its body,
// unread, kept the server from watching for the sender going), leaving a
// goroutine and a connection per redelivery for as long as the wipe ran.
func waiterOutlivesItsSender(t *testing.T, p proxy.PurgeRequest, stands []string) {
	nodes := startRealNodes(t, []string{"A", "B", "C"}, routing.ModeHybrid, 2, 100*time.Millisecond, &slowOrigin{})
	a, b, c := nodes["A"], nodes["B"], nodes["C"]
	release := make(chan struct{})
	var runs atomic.Int32
	h := b.c.PeerHandler(b.ph.ServeInbound, func(q proxy.PurgeRequest) (int, error) {
		runs.Add(1)
		<-release // a wipe or prefix purge over a large (or stuck) disk
		return b.ph.Purge(q)
	})
	var inFlight atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		inFlight.Add(1)
		defer inFlight.Add(-1)
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(release) })
	addr := strings.TrimPrefix(srv.URL, "http://")
	pid := newPurgeID()
	covers := time.Time{}
	if p == purgeEverything {
		covers = time.Now()
	}
	go c.c.sendPurge(context.Background(), "B", addr, p, pid, true, nil, covers, stands)
	waitUntil(t, "C's delivery to run at B", func() bool { return runs.Load() == 1 })
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	ans := a.c.sendPurge(ctx, "B", addr, p, pid, true, nil, covers, stands)
	t.Logf("A's delivery: answer %v after %v", ans, time.Since(start))
	deadline := time.Now().Add(2 * time.Second)
	for inFlight.Load() > 1 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := inFlight.Load(); n > 1 {
		t.Errorf("2 s after A gave up, B still has %d purge handlers running (A's waits in the poll loop for as long as C's run lasts: a goroutine and a connection per redelivery)", n)
	}
}

func TestAPurgeWaiterEndsWithItsSender(t *testing.T) {
	waiterOutlivesItsSender(t, proxy.PurgeRequest{Prefix: "/big/"}, nil)
}

func TestAWipeWaiterEndsWithItsSender(t *testing.T) {
	waiterOutlivesItsSender(t, purgeEverything, []string{newPurgeID(), newPurgeID()})
}
