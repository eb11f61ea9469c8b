package cluster

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edgecache/edge/proxy"
	"github.com/edgecache/edge/routing"
)

// pausingOrigin answers every page after a pause, cacheable, counting its
// fetches: long enough that two nodes' fills of one page overlap.
type pausingOrigin struct {
	pause time.Duration
	n     atomic.Int64
}

func (o *pausingOrigin) Fetch(ctx context.Context, _ proxy.FetchRequest) (proxy.Result, error) {
	o.n.Add(1)
	select {
	case <-time.After(o.pause):
	case <-ctx.Done():
		return proxy.Result{}, ctx.Err()
	}
	h := http.Header{"Cache-Control": {"max-age=600"}}
	return proxy.Result{Resp: &http.Response{StatusCode: 200, Header: h, Body: io.NopCloser(strings.NewReader("page")), ContentLength: 4}, Keep: true}, nil
}

// TestTreeClimbsDoNotWaitOnEachOther: in a tree, two ingresses can each lie
// on the other's path (with two nodes, the home's client climbs through
// the leaf and the leaf's client through the home; with three, two
// siblings whose clients' random leaves lie under each other). A climb from a peer
// that joined the fill this node leads for its own client waited on that
// fill, which waited on the peer's climb, which waited on the peer's own
// fill: all three clients waited until the peer header timeout
// (4 × cluster.peer_timeout; 3 rounds of 12 without the wait order). A
// climb now joins only fills that wait on no peer or are older than its
// own (proxy/waitorder.go).
func TestTreeClimbsDoNotWaitOnEachOther(t *testing.T) {
	origin := &pausingOrigin{pause: 300 * time.Millisecond}
	const peerTimeout = time.Second // a wait on each other takes 4 s
	ids := []string{"A", "B", "C"}
	nodes := startRealNodes(t, ids, routing.ModeTree, 2, peerTimeout, origin)
	for round := range 12 {
		path := "/hot/" + strconv.Itoa(round)
		took := askEveryNodeAtOnce(t, ids, func(id string) {
			w := httptest.NewRecorder()
			nodes[id].ph.ServeHTTP(w, httptest.NewRequest("GET", "http://site.example"+path, nil))
			if w.Code != http.StatusOK || w.Body.String() != "page" {
				t.Errorf("%s at %s: %d %q", path, id, w.Code, w.Body.String())
			}
		})
		t.Logf("%s: %v, origin fetches so far %d", path, took, origin.n.Load())
		noneWaitedOut(t, path, took, peerTimeout, "the fills")
	}
}

// crowd asks every node in ids for path per times at once.
func crowd(t *testing.T, nodes map[string]*realNode, ids []string, path string, per int) {
	var wg sync.WaitGroup
	for _, id := range ids {
		for range per {
			wg.Go(func() {
				w := httptest.NewRecorder()
				nodes[id].ph.ServeHTTP(w, httptest.NewRequest("GET", "http://site.example"+path, nil))
				if w.Code != http.StatusOK || w.Body.String() != "page" {
					t.Errorf("%s at %s: %d %q", path, id, w.Code, w.Body.String())
				}
			})
		}
	}
	wg.Wait()
}

// TestFlashCrowdOriginFetches: ten requests at each of three nodes at once
// for each of eight pages (hybrid mode, the default). Cold pages cost the
// origin one fetch each, and so do hot ones (hot_threshold 1: every
// ingress climbs a tree) when measured (8 for 8 in five runs); at most two
// are allowed for a loaded machine. Without the wait order some rounds
// waited on each other for 4 × cluster.peer_timeout (4 s here); a static
// rule tried before it, which kept the home's own client fill apart from
// the climbs to it, cost 14–16 fetches for 8 hot pages.
func TestFlashCrowdOriginFetches(t *testing.T) {
	for _, c := range []struct {
		name      string
		threshold int
		most      int64
	}{{"cold", 64, 1}, {"hot", 1, 2}} {
		t.Run(c.name, func(t *testing.T) {
			origin := &pausingOrigin{pause: 300 * time.Millisecond}
			ids := []string{"A", "B", "C"}
			nodes := startRealNodesHot(t, ids, routing.ModeHybrid, 2, time.Second, origin, c.threshold)
			const pages = 8
			start := time.Now()
			var wg sync.WaitGroup
			for p := range pages {
				wg.Go(func() { crowd(t, nodes, ids, "/"+c.name+"/"+strconv.Itoa(p), 10) })
			}
			wg.Wait()
			took := time.Since(start)
			t.Logf("%d origin fetches for %d %s pages in %v", origin.n.Load(), pages, c.name, took)
			if took >= 4*time.Second {
				t.Errorf("the crowd took %v: fills waited on each other until the peer header timeout", took)
			}
			if n := origin.n.Load(); n > c.most*pages {
				t.Errorf("%d origin fetches for %d %s pages, want at most %d each", n, pages, c.name, c.most)
			}
		})
	}
}

// askEveryNodeAtOnce runs ask for every node in ids at once and returns
// how long each took.
func askEveryNodeAtOnce(t *testing.T, ids []string, ask func(id string)) map[string]time.Duration {
	t.Helper()
	var wg sync.WaitGroup
	var mu sync.Mutex
	took := map[string]time.Duration{}
	for _, id := range ids {
		wg.Go(func() {
			start := time.Now()
			ask(id)
			mu.Lock()
			took[id] = time.Since(start)
			mu.Unlock()
		})
	}
	wg.Wait()
	return took
}

// noneWaitedOut fails each node whose answer took the peer header
// timeout (4 × peer timeout pt): what waits on each other ends with.
func noneWaitedOut(t *testing.T, path string, took map[string]time.Duration, pt time.Duration, what string) {
	t.Helper()
	for id, d := range took {
		if d >= 4*pt {
			t.Errorf("%s at %s took %v: %s waited on each other until the peer header timeout", path, id, d, what)
		}
	}
}
