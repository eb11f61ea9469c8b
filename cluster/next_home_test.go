package cluster

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/edgecache/edge/indicators"
	"github.com/edgecache/edge/proxy"
	"github.com/edgecache/edge/routing"
)

// realNode is a cluster member with the real caching handler behind its
// peer listener (as node.New wires it): peer climbs go through the proxy,
// with request coalescing.
type realNode struct {
	id  string
	c   *Cluster
	ph  *proxy.Handler
	srv *httptest.Server
	// hold, if set, sees each peer request before the node serves it
	// (a test's gate: it may block until the test lets it go).
	hold atomic.Pointer[func(*http.Request)]
	// cutProbes, if set, breaks every probe answer after its header and
	// first body bytes (the connection is aborted mid-body), and calls
	// onCut, if set, once it has.
	cutProbes atomic.Bool
	onCut     atomic.Pointer[func()]
}

// cuttingWriter writes the first body bytes it is given, then aborts the
// connection (the client sees a body cut short).
type cuttingWriter struct {
	http.ResponseWriter
	cut func()
}

func (w cuttingWriter) Write(b []byte) (int, error) {
	_, _ = w.ResponseWriter.Write(b[:min(len(b), 1)])
	_ = http.NewResponseController(w.ResponseWriter).Flush()
	if w.cut != nil {
		w.cut()
	}
	panic(http.ErrAbortHandler)
}

func (w cuttingWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func startRealNodes(t testing.TB, ids []string, mode routing.Mode, arity int, pt time.Duration, origin proxy.Fetcher) map[string]*realNode {
	t.Helper()
	return startRealNodesHot(t, ids, mode, arity, pt, origin, 1000)
}

// startRealNodesHot is startRealNodes with routing.hot_threshold hot.
func startRealNodesHot(t testing.TB, ids []string, mode routing.Mode, arity int, pt time.Duration, origin proxy.Fetcher, hot int) map[string]*realNode {
	t.Helper()
	return startRealNodesWith(t, ids, mode, arity, pt, origin, hot, nodeTuning{})
}

// nodeTuning changes what startRealNodesWith gives each node.
type nodeTuning struct {
	proxy      func(*proxy.Config) // nil: the defaults
	storeBytes int64               // 0: 1 MiB
	peerWhole  int64               // cluster.peer_whole_bytes (0: every peer answer streams)
	stateDir   string              // cluster.state_dir is this/<id> ("": none)
}

// startRealNodesWith is startRealNodesHot with the nodes tuned by nt.
func startRealNodesWith(t testing.TB, ids []string, mode routing.Mode, arity int, pt time.Duration, origin proxy.Fetcher, hot int, nt nodeTuning) map[string]*realNode {
	t.Helper()
	nodes := map[string]*realNode{}
	for _, id := range ids {
		nodes[id] = newRealNode(t, id, mode, arity, pt, origin, hot, nt)
	}
	for _, n := range nodes {
		for _, m := range nodes {
			if n != m {
				n.c.addPeer(m.id, strings.TrimPrefix(m.srv.URL, "http://"))
				n.c.peers[m.id].trusted, n.c.peers[m.id].member = true, true
				n.c.peers[m.id].returnedAt = time.Time{} // peers of long standing (returned.go)
			}
		}
		n.c.setView()
	}
	return nodes
}

// newRealNode starts one node of startRealNodesWith, linked to no peer.
func newRealNode(t testing.TB, id string, mode routing.Mode, arity int, pt time.Duration, origin proxy.Fetcher, hot int, nt nodeTuning) *realNode {
	t.Helper()
	if nt.storeBytes == 0 {
		nt.storeBytes = 1 << 20
	}
	stateDir := ""
	if nt.stateDir != "" {
		stateDir = filepath.Join(nt.stateDir, id)
	}
	store := proxy.NewStore(nt.storeBytes, 4)
	c, err := New(Config{
		NodeID: id, Listen: "127.0.0.1:0", Secret: []byte(planSecret), Period: 100 * time.Millisecond,
		Detector: "ml", Selection: SelectionOff, Mode: mode, Placement: routing.PlacementDistinct, Arity: arity, Q: 2, HotThreshold: hot,
		PeerTimeout: pt, Indicator: indicators.DefaultFilterConfig(1000), PeerWholeBytes: nt.peerWhole, StateDir: stateDir,
	}, origin, store, NewMetrics(prometheus.NewRegistry()), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() }) // its state_dir, for the next test's node
	pc := proxy.DefaultConfig()
	pc.NodeID = id
	if nt.proxy != nil {
		nt.proxy(&pc)
	}
	ph := proxy.New(pc, store, c, proxy.NewMetrics(prometheus.NewRegistry(), store), nil)
	n := &realNode{id: id, c: c, ph: ph}
	c.SetPurgeNamer(ph)
	peerHandler := c.PeerHandler(ph.ServeInbound, ph.Purge)
	n.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if hold := n.hold.Load(); hold != nil {
			(*hold)(r)
		}
		if n.cutProbes.Load() && r.Header.Get(hdrMode) == hopProbe.String() {
			cw := cuttingWriter{ResponseWriter: w}
			if f := n.onCut.Load(); f != nil {
				cw.cut = *f
			}
			w = cw
		}
		peerHandler.ServeHTTP(w, r)
	}))
	t.Cleanup(n.srv.Close)
	return n
}

// rankingOf is the page's rendezvous ranking in n's view.
func rankingOf(n *realNode, path string) []string {
	u, _ := url.Parse("http://site.example" + path)
	kh := routing.KeyHash(n.ph.URLKey(u))
	ring := n.c.router.Ring()
	var out []string
	for _, i := range ring.Ranking(nil, kh) {
		out = append(out, ring.Member(int(i)))
	}
	return out
}

type slowOrigin struct{ n atomic.Int64 }

func (o *slowOrigin) Fetch(ctx context.Context, fr proxy.FetchRequest) (proxy.Result, error) {
	o.n.Add(1)
	h := http.Header{"Cache-Control": {"max-age=600"}, "Content-Type": {"text/plain"}}
	return proxy.Result{Resp: &http.Response{StatusCode: 200, Header: h, Body: io.NopCloser(strings.NewReader("page")), ContentLength: 4}, Keep: true}, nil
}

// The home H has just crashed (connection refused) and is still trusted.
// A hot page's tree path at ingress A is [M (rank 4), H (rank 2)], and A
// itself is the page's next home (ranking [H, A, M, X]). A climbs to M; M
// finds H dead and asks the next home, A, "as the home"; A's proxy
// coalesces that request onto A's own fill for the page, which is waiting
// for M: a wait cycle A→M→A broken only by the peer transport's
// ResponseHeaderTimeout (4 × peer_timeout, 2 s by default). Before the
// change, M went straight to the origin and the client waited milliseconds.
func TestNextHomeWaitCycleThroughIngress(t *testing.T) {
	const pt = 200 * time.Millisecond
	origin := &slowOrigin{}
	nodes := startRealNodes(t, []string{"A", "M", "H", "X"}, routing.ModeTree, 2, pt, origin)
	a := nodes["A"]
	var paths []string
	for i := 0; len(paths) < 12 && i < 100000; i++ {
		p := "/p/" + strconv.Itoa(i)
		r := rankingOf(a, p)
		if r[0] == "H" && r[1] == "A" && r[2] == "M" {
			paths = append(paths, p)
		}
	}
	nodes["H"].srv.Close() // crashed, not yet suspected
	var worst time.Duration
	for _, p := range paths {
		t0 := time.Now()
		w := httptest.NewRecorder()
		a.ph.ServeHTTP(w, httptest.NewRequest("GET", "http://site.example"+p, nil))
		d := time.Since(t0)
		worst = max(worst, d)
		t.Logf("%s: %d in %v (%s)", p, w.Code, d.Round(time.Millisecond), w.Header().Get("Cache-Status"))
	}
	t.Logf("origin fetches %d for %d pages; slowest miss %v", origin.n.Load(), len(paths), worst)
	// The cycle needs a next home asked along a tree path. Whether one was
	// asked is counted, not timed (a loaded machine makes every miss slow).
	for _, n := range nodes {
		for _, outcome := range []string{"next_home", "next_home_failed"} {
			if v := testutil.ToFloat64(n.c.metrics.ClimbHops.WithLabelValues(outcome)); v != 0 {
				t.Errorf("%s: %v climbs with outcome %s in tree mode; a next home on a tree path can wait in a cycle (A→M→A)", n.id, v, outcome)
			}
		}
	}
}

// A healthy home whose origin answers 5xx (the home relays the 500) is
// treated as a failed home: the ingress now also asks the next home, which
// asks the origin again, before asking the origin itself. One client miss
// costs the failing origin 3 requests instead of 2.
func TestHealthyHome5xxAsksNextHome(t *testing.T) {
	origin := &countingOrigin{}
	c := newPlanCluster(t, "n0", routing.ModeHybrid, SelectionOff, origin)
	p1, p2 := startFakePeer(t, "p1"), startFakePeer(t, "p2")
	join(c, p1, p2)
	var path string
	for i := range 100000 {
		p := "/k/" + strconv.Itoa(i)
		kh := routing.KeyHash(proxy.CacheKey("http", "site.example", p, ""))
		ring := c.router.Ring()
		r := ring.Ranking(nil, kh)
		if ring.Member(int(r[0])) == "p1" && ring.Member(int(r[1])) == "p2" {
			path = p
			break
		}
	}
	originError := func(w http.ResponseWriter, _ *http.Request, _ *route) {
		http.Error(w, "origin said 500", http.StatusInternalServerError) // what a home relays
	}
	p1.setAnswer(originError)
	p2.setAnswer(originError)
	_, _, _ = fetchBody(t, c, path)
	t.Logf("home p1 saw %d, next home p2 saw %d, ingress origin fetches %d", len(p1.routes()), len(p2.routes()), origin.n.Load())
	if len(p2.routes()) != 0 {
		t.Errorf("the home answered (a relayed origin 5xx), yet the next home was asked too: %d origin-bound requests for one miss instead of 2",
			len(p1.routes())+len(p2.routes())+int(origin.n.Load()))
	}
}
