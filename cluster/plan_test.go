package cluster

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/edgecache/edge/indicators"
	"github.com/edgecache/edge/origin"
	"github.com/edgecache/edge/proxy"
	"github.com/edgecache/edge/routing"
)

// Deterministic tests of the request plan (probe, climb, continueClimb,
// failover, the q-rule and the loop guard) with fake peers: each peer is a
// real loopback HTTP server running the real peer handler (signatures,
// route parsing, response signing) in front of a scripted data handler.

const planSecret = "plan-test-secret-0123"

// fakePeer is one scripted peer.
type fakePeer struct {
	id     string
	srv    *httptest.Server
	mu     sync.Mutex
	seen   []seenRoute
	answer func(w http.ResponseWriter, r *http.Request, rt *route) // nil: 200 "from <id>"
}

type seenRoute struct {
	mode      string
	rank, hop int
	remaining string
}

func (f *fakePeer) routes() []seenRoute {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]seenRoute(nil), f.seen...)
}

// countingOrigin is the ingress's origin fetcher.
type countingOrigin struct{ n atomic.Int64 }

func (o *countingOrigin) Fetch(ctx context.Context, fr proxy.FetchRequest) (proxy.Result, error) {
	o.n.Add(1)
	return proxy.Result{Resp: &http.Response{StatusCode: 200, Header: http.Header{}, Body: io.NopCloser(strings.NewReader("from origin"))}, Keep: true}, nil
}

func newPlanCluster(t *testing.T, id string, mode routing.Mode, sel Selection, origin proxy.Fetcher) *Cluster {
	t.Helper()
	c, err := New(Config{
		NodeID: id, Listen: "127.0.0.1:0", Secret: []byte(planSecret), Period: 100 * time.Millisecond,
		Detector: "ml", Selection: sel, Mode: mode, Placement: routing.PlacementDistinct, Arity: 2, Q: 2, HotThreshold: 1000,
		PeerTimeout: 300 * time.Millisecond, Indicator: indicators.DefaultFilterConfig(1000),
	}, origin, proxy.NewStore(1<<20, 4), NewMetrics(prometheus.NewRegistry()), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// startFakePeer serves a scripted peer with the real peer handler.
func startFakePeer(t *testing.T, id string) *fakePeer {
	t.Helper()
	f := &fakePeer{id: id}
	pc := newPlanCluster(t, id, routing.ModeRing, SelectionOff, &countingOrigin{})
	h := pc.PeerHandler(func(w http.ResponseWriter, r *http.Request, in proxy.Inbound) {
		rt := in.Route.(*route)
		f.mu.Lock()
		f.seen = append(f.seen, seenRoute{rt.mode.String(), rt.rank, rt.hop, strings.Join(rt.remaining, ",")})
		answer := f.answer
		f.mu.Unlock()
		if answer != nil {
			answer(w, r, rt)
			return
		}
		_, _ = io.WriteString(w, "from "+id)
	}, func(proxy.PurgeRequest) (int, error) { return 0, nil })
	f.srv = httptest.NewServer(h)
	t.Cleanup(f.srv.Close)
	return f
}

// setAnswer scripts the peer's next answers (under mu: a late request of an
// earlier step may still be reading the previous script).
func (f *fakePeer) setAnswer(a func(http.ResponseWriter, *http.Request, *route)) {
	f.mu.Lock()
	f.answer = a
	f.mu.Unlock()
}

// join makes the ingress trust the fake peers and puts them in its view.
func join(c *Cluster, peers ...*fakePeer) {
	for _, p := range peers {
		c.addPeer(p.id, strings.TrimPrefix(p.srv.URL, "http://"))
		c.peers[p.id].trusted, c.peers[p.id].member = true, true
		c.peers[p.id].returnedAt = time.Time{} // a peer of long standing (returned.go)
	}
	c.setView()
}

func fetchBody(t *testing.T, c *Cluster, path string) (string, bool, error) {
	t.Helper()
	req := httptest.NewRequest("GET", "http://site.example"+path, nil)
	req.RequestURI = ""
	res, err := c.Fetch(context.Background(), proxy.FetchRequest{Key: proxy.CacheKey("http", "site.example", path, ""), Req: req})
	if err != nil {
		return "", false, err
	}
	defer res.Resp.Body.Close()
	b, err := io.ReadAll(res.Resp.Body)
	return string(b), res.Keep, err
}

// keyHomedAt finds a URL path whose planned climb (cold) starts at want:
// its home in hybrid mode, its owner in ring mode.
func keyHomedAt(t *testing.T, c *Cluster, want string) string {
	t.Helper()
	for i := range 10000 {
		path := "/k/" + string(rune('a'+i%26)) + strings.Repeat("x", i/26)
		hops, _, _ := c.planFor(routing.KeyHash(proxy.CacheKey("http", "site.example", path, "")), false, func(n int) int { return n - 1 })
		if len(hops) > 0 && hops[0].id == want {
			return path
		}
	}
	t.Fatalf("no key homed at %s", want)
	return ""
}

func TestClimbGoesToTheHomeWithItsRank(t *testing.T) {
	origin := &countingOrigin{}
	c := newPlanCluster(t, "n0", routing.ModeHybrid, SelectionOff, origin)
	p1, p2 := startFakePeer(t, "p1"), startFakePeer(t, "p2")
	join(c, p1, p2)
	path := keyHomedAt(t, c, "p2")
	body, keep, err := fetchBody(t, c, path)
	if err != nil || body != "from p2" {
		t.Fatalf("got %q, %v; want the home's answer", body, err)
	}
	if keep {
		t.Error("the ingress kept a page on its first request (q = 2)")
	}
	if r := p2.routes(); len(r) != 1 || r[0] != (seenRoute{"climb", 2, 1, ""}) {
		t.Errorf("the home saw %+v, want one climb at rank 2, hop 1, nothing after it", r)
	}
	if len(p1.routes()) != 0 || origin.n.Load() != 0 {
		t.Errorf("p1 saw %d requests and the origin %d; want none", len(p1.routes()), origin.n.Load())
	}
	// The q-rule at the ingress: the second request for the page keeps it.
	if _, keep, _ := fetchBody(t, c, path); !keep {
		t.Error("the ingress did not keep the page on its q-th request")
	}
}

func TestClimbFailsOverPastADeadOrFailingHop(t *testing.T) {
	for _, how := range []string{"dead", "5xx"} {
		t.Run(how, func(t *testing.T) {
			origin := &countingOrigin{}
			c := newPlanCluster(t, "n0", routing.ModeRing, SelectionOff, origin)
			p1 := startFakePeer(t, "p1")
			join(c, p1)
			path := keyHomedAt(t, c, "p1")
			if how == "dead" {
				p1.srv.Close()
			} else {
				p1.setAnswer(func(w http.ResponseWriter, _ *http.Request, _ *route) { http.Error(w, "boom", 500) })
			}
			body, _, err := fetchBody(t, c, path)
			if err != nil || body != "from origin" || origin.n.Load() != 1 {
				t.Fatalf("got %q, %v, %d origin fetches; want the origin's answer once", body, err, origin.n.Load())
			}
			if how == "5xx" && len(p1.routes()) != 1 {
				t.Fatalf("the owner saw %d requests, want 1 before the failover", len(p1.routes()))
			}
		})
	}
}

func TestProbeHitAndMiss(t *testing.T) {
	origin := &countingOrigin{}
	c := newPlanCluster(t, "n0", routing.ModeRing, SelectionFNA, origin)
	p1, p2 := startFakePeer(t, "p1"), startFakePeer(t, "p2")
	join(c, p1, p2)
	path := keyHomedAt(t, c, "p2")
	key := proxy.CacheKey("http", "site.example", path, "")
	// p1 advertises the key: it becomes a positively indicated candidate.
	adv := newPlanCluster(t, "p1", routing.ModeRing, SelectionOff, origin)
	adv.filter.Insert([]byte(key))
	adv.store.(*proxy.Store).Put(testEntry(key))
	adv.advertise()
	if err := c.peers["p1"].replica.Apply(adv.advFull); err != nil {
		t.Fatal(err)
	}
	// Probe hit: p1 answers the only-if-cached probe.
	p1.setAnswer(func(w http.ResponseWriter, r *http.Request, rt *route) {
		if r.Header.Get("Cache-Control") != "only-if-cached" {
			t.Errorf("a probe without only-if-cached: %q", r.Header.Get("Cache-Control"))
		}
		w.Header().Set("Cache-Status", "p1; hit") // as a node's store answers (proxy.AnsweredFromStore)
		_, _ = io.WriteString(w, "from p1's store")
	})
	body, _, err := fetchBody(t, c, path)
	if err != nil || body != "from p1's store" {
		t.Fatalf("probe hit: %q, %v", body, err)
	}
	if r := p1.routes(); len(r) != 1 || r[0].mode != "probe" {
		t.Fatalf("p1 saw %+v, want one probe", r)
	}
	p1.mu.Lock()
	p1.seen = nil
	p1.mu.Unlock()
	if len(p2.routes()) != 0 {
		t.Fatalf("the home was asked although the probe hit: %+v", p2.routes())
	}
	// A probe hit whose body takes longer than the peer timeout (a lossy
	// link) is read to the end: the probe's deadline is for headers only.
	p1.setAnswer(func(w http.ResponseWriter, r *http.Request, rt *route) {
		w.Header().Set("Cache-Status", "p1; hit")
		_, _ = io.WriteString(w, strings.Repeat("a", 100_000))
		time.Sleep(2 * c.cfg.PeerTimeout)
		_, _ = io.WriteString(w, "end")
	})
	body, _, err = fetchBody(t, c, path)
	if err != nil || len(body) != 100_003 {
		t.Fatalf("slow probe hit: %d bytes, %v; want the whole body", len(body), err)
	}
	// Probe miss (504): the climb to the home follows.
	p1.setAnswer(func(w http.ResponseWriter, r *http.Request, rt *route) {
		http.Error(w, "not cached", http.StatusGatewayTimeout)
	})
	body, _, err = fetchBody(t, c, path)
	if err != nil || body != "from p2" {
		t.Fatalf("probe miss: %q, %v; want the home's answer", body, err)
	}
	if origin.n.Load() != 0 {
		t.Fatalf("the origin was asked %d times", origin.n.Load())
	}
}

func testEntry(key string) *proxy.Entry {
	e := &proxy.Entry{Key: key, Status: 200, Header: http.Header{}, Body: []byte("x")}
	return e
}

func TestContinueClimbFollowsTheGivenPathAndAppliesQ(t *testing.T) {
	origin := &countingOrigin{}
	c := newPlanCluster(t, "n0", routing.ModeTree, SelectionOff, origin)
	p1, p2 := startFakePeer(t, "p1"), startFakePeer(t, "p2")
	join(c, p1, p2)
	req := httptest.NewRequest("GET", "http://site.example/a", nil)
	req.RequestURI = ""
	key := proxy.CacheKey("http", "site.example", "/a", "")
	// This cache plays rank 3 and must forward to p2 (rank 2), skipping a
	// path entry that names itself (a loop).
	rt := &route{mode: hopClimb, rank: 3, hop: 1, remaining: []string{"n0:4", "p2:2"}}
	for i, wantKeep := range []bool{false, true} { // q = 2
		res, err := c.Fetch(context.Background(), proxy.FetchRequest{Key: key, Req: req, Route: rt})
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(res.Resp.Body)
		res.Resp.Body.Close()
		if string(b) != "from p2" || res.Keep != wantKeep {
			t.Fatalf("request %d: %q keep=%v, want p2's answer, keep=%v", i+1, b, res.Keep, wantKeep)
		}
	}
	if r := p2.routes(); len(r) != 2 || r[0] != (seenRoute{"climb", 2, 2, ""}) {
		t.Fatalf("p2 saw %+v, want climbs at rank 2, hop 2", r)
	}
	if len(p1.routes()) != 0 {
		t.Fatalf("p1 is not on the given path but saw %+v", p1.routes())
	}
	// The home (rank 2) always keeps its copy.
	rt2 := &route{mode: hopClimb, rank: 2, hop: 1}
	res, err := c.Fetch(context.Background(), proxy.FetchRequest{Key: proxy.CacheKey("http", "site.example", "/b", ""), Req: req, Route: rt2})
	if err != nil || !res.Keep {
		t.Fatalf("the home did not keep the page: %v, %v", res.Keep, err)
	}
	res.Resp.Body.Close()
	// A probe that reaches the fetcher is refused: probes never fetch.
	if _, err := c.Fetch(context.Background(), proxy.FetchRequest{Key: key, Req: req, Route: &route{mode: hopProbe}}); err == nil {
		t.Fatal("a probe reached the origin")
	}
}

// TestNextHomeReplacesAFailedHome: when a page's home is unreachable, the
// ingress asks the page's next home (the one it gets once the failed one
// leaves the view) as rank 2, not the origin; when that next home is the
// ingress itself, it fetches and keeps the page. A home that answers 5xx is
// alive (relaying its origin's error): nobody else is asked for it.
func TestNextHomeReplacesAFailedHome(t *testing.T) {
	origin := &countingOrigin{}
	c := newPlanCluster(t, "n0", routing.ModeHybrid, SelectionOff, origin)
	peers := map[string]*fakePeer{"p1": startFakePeer(t, "p1"), "p2": startFakePeer(t, "p2"), "p3": startFakePeer(t, "p3")}
	join(c, peers["p1"], peers["p2"], peers["p3"])
	var toPeer, toSelf string
	for i := range 10000 {
		path := "/n/" + strconv.Itoa(i)
		kh := routing.KeyHash(proxy.CacheKey("http", "site.example", path, ""))
		if hops, _, _ := c.planFor(kh, false, func(n int) int { return n - 1 }); len(hops) != 1 || hops[0].id != "p1" {
			continue
		}
		switch next := c.nextHome(kh, []string{"p1"}); {
		case next == "n0" && toSelf == "":
			toSelf = path
		case next != "n0" && toPeer == "":
			toPeer = path
		}
	}
	if toPeer == "" || toSelf == "" {
		t.Fatal("no key with both kinds of next home")
	}
	kh := routing.KeyHash(proxy.CacheKey("http", "site.example", toPeer, ""))
	next := peers[c.nextHome(kh, []string{"p1"})]
	peers["p1"].setAnswer(func(w http.ResponseWriter, _ *http.Request, _ *route) {
		http.Error(w, "origin down", http.StatusBadGateway)
	})
	if body, _, _ := fetchBody(t, c, toPeer); body != "from origin" || len(next.routes()) != 0 {
		t.Fatalf("a home answering 502: got %q and the next home saw %d requests; want the origin asked once, nobody else", body, len(next.routes()))
	}
	origin.n.Store(0)
	peers["p1"].srv.Close() // unreachable now
	body, _, err := fetchBody(t, c, toPeer)
	if err != nil || body != "from "+next.id || origin.n.Load() != 0 {
		t.Fatalf("got %q, %v, %d origin fetches; want %s's answer and no origin fetch", body, err, origin.n.Load(), next.id)
	}
	if r := next.routes(); len(r) != 1 || r[0].mode != "climb" || r[0].rank != 2 || r[0].remaining != "" {
		t.Errorf("the next home saw %+v, want one climb at rank 2 with nothing after it", r)
	}
	body, keep, err := fetchBody(t, c, toSelf)
	if err != nil || body != "from origin" || !keep || origin.n.Load() != 1 {
		t.Fatalf("got %q keep=%v, %v, %d origin fetches; want this node, the next home, to fetch once and keep", body, keep, err, origin.n.Load())
	}
}

// TestSuspicionEndsAPeerBodyMidStream: a peer that stops mid-body is cut off
// when it is suspected, not after the (long) idle timeout.
func TestSuspicionEndsAPeerBodyMidStream(t *testing.T) {
	c := newPlanCluster(t, "n0", routing.ModeRing, SelectionOff, &countingOrigin{})
	p1 := startFakePeer(t, "p1")
	release := make(chan struct{})
	defer close(release)
	p1.setAnswer(func(w http.ResponseWriter, _ *http.Request, _ *route) {
		_, _ = io.WriteString(w, strings.Repeat("x", 100_000)) // past every buffer: on the wire
		<-release                                              // a silent peer
	})
	join(c, p1)
	res := fetchHomedAtP1(t, c)
	defer res.Resp.Body.Close()
	go func() {
		time.Sleep(200 * time.Millisecond)
		c.mu.Lock()
		c.setTrust(c.peers["p1"], false)
		c.mu.Unlock()
	}()
	start := time.Now()
	_, err := io.ReadAll(res.Resp.Body)
	if err == nil {
		t.Fatal("the body of a suspected peer ended cleanly")
	}
	if d := time.Since(start); d > c.peerBodyIdle()/2 {
		t.Errorf("the body ended %v after it stalled; want it ended at the suspicion, not the %v idle timeout", d, c.peerBodyIdle())
	}
}

// TestSuspicionLeavesAFlowingBodyAlone: a false suspicion (the peer alive,
// its answer still coming) does not cut the answer: the client gets every
// byte. A stream that then goes silent ends after cluster.peer_timeout,
// not the trusted peer's long idle timeout.
func TestSuspicionLeavesAFlowingBodyAlone(t *testing.T) {
	c := newPlanCluster(t, "n0", routing.ModeRing, SelectionOff, &countingOrigin{})
	p1 := startFakePeer(t, "p1")
	const chunks, chunk = 30, 1000
	suspected := make(chan struct{})
	release := make(chan struct{})
	defer close(release)
	p1.setAnswer(func(w http.ResponseWriter, _ *http.Request, _ *route) {
		for i := range chunks {
			if i == 10 {
				<-suspected // the suspicion comes mid-body
			}
			_, _ = io.WriteString(w, strings.Repeat("x", chunk))
			_ = http.NewResponseController(w).Flush()
			time.Sleep(20 * time.Millisecond) // flowing: never silent for long
		}
	})
	join(c, p1)
	res := fetchHomedAtP1(t, c)
	defer res.Resp.Body.Close()
	if _, err := io.ReadFull(res.Resp.Body, make([]byte, chunk)); err != nil {
		t.Fatal(err)
	}
	c.mu.Lock()
	c.setTrust(c.peers["p1"], false)
	c.mu.Unlock()
	close(suspected)
	rest, err := io.ReadAll(res.Resp.Body)
	if err != nil || len(rest) != (chunks-1)*chunk {
		t.Fatalf("after a false suspicion the body gave %d more bytes and %v; want all %d", len(rest), err, (chunks-1)*chunk)
	}
	if got := testutil.ToFloat64(c.metrics.SuspectedPeerRequests.WithLabelValues("streaming")); got != 1 {
		t.Errorf("edge_peer_suspected_requests_total{outcome=streaming} = %v, want 1", got)
	}
}

// TestSuspicionEndsABodyThatGoesSilentLater: a stream from a suspected peer
// that goes silent ends after cluster.peer_timeout of silence; a peer
// trusted again gets a trusted peer's limit back.
func TestSuspicionEndsABodyThatGoesSilentLater(t *testing.T) {
	c := newPlanCluster(t, "n0", routing.ModeRing, SelectionOff, &countingOrigin{})
	p1 := startFakePeer(t, "p1")
	release := make(chan struct{})
	defer close(release)
	p1.setAnswer(func(w http.ResponseWriter, _ *http.Request, _ *route) {
		_, _ = io.WriteString(w, strings.Repeat("x", 1000))
		_ = http.NewResponseController(w).Flush()
		<-release
	})
	join(c, p1)
	path := keyHomedAt(t, c, "p1")
	req := httptest.NewRequest("GET", "http://site.example"+path, nil)
	req.RequestURI = ""
	res, err := c.Fetch(context.Background(), proxy.FetchRequest{Key: proxy.CacheKey("http", "site.example", path, ""), Req: req})
	if err != nil {
		t.Fatal(err)
	}
	body := res.Resp.Body
	defer body.Close()
	if _, err := io.ReadFull(body, make([]byte, 1000)); err != nil {
		t.Fatal(err)
	}
	setTrust := func(trusted bool) {
		c.mu.Lock()
		c.setTrust(c.peers["p1"], trusted)
		c.mu.Unlock()
	}
	// Suspected and trusted again before the silence ran out: the body is
	// a trusted peer's again and outlives several peer timeouts.
	setTrust(false)
	setTrust(true)
	got := make(chan error, 1)
	start := time.Now()
	go func() { _, err := io.ReadAll(body); got <- err }()
	select {
	case err := <-got:
		t.Fatalf("a trusted-again peer's body ended %v into a silence: %v", time.Since(start), err)
	case <-time.After(3 * c.cfg.PeerTimeout):
	}
	// Suspected now, silent for 3 × peer_timeout already: it ends at once.
	setTrust(false)
	select {
	case err := <-got:
		if !errors.Is(err, origin.ErrBodyStalled) {
			t.Fatalf("a suspected peer's silent body ended with %v, want %v", err, origin.ErrBodyStalled)
		}
	case <-time.After(c.peerBodyIdle() / 2):
		t.Fatalf("a suspected peer's body silent for %v did not end", time.Since(start))
	}
}

// fetchHomedAtP1 asks c for a page homed at peer p1 (joined to c).
func fetchHomedAtP1(t *testing.T, c *Cluster) proxy.Result {
	t.Helper()
	path := keyHomedAt(t, c, "p1")
	req := httptest.NewRequest("GET", "http://site.example"+path, nil)
	req.RequestURI = ""
	res, err := c.Fetch(context.Background(), proxy.FetchRequest{Key: proxy.CacheKey("http", "site.example", path, ""), Req: req})
	if err != nil {
		t.Fatal(err)
	}
	return res
}
