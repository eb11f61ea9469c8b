package cluster

import (
	"context"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edgecache/edge/proxy"
	"github.com/edgecache/edge/routing"
)

// trickleOrigin answers "vN path" plus padding; while version is 1 the
// body of path slowPath comes one byte every 200 ms (an origin sending a
// page slowly, e.g. a large one over a slow link).
type trickleOrigin struct {
	version  atomic.Int32
	slowPath atomic.Pointer[string]
	fetches  atomic.Int64
}

type trickleReader struct {
	s   string
	ctx context.Context
}

func (r *trickleReader) Read(b []byte) (int, error) {
	if r.s == "" {
		return 0, io.EOF
	}
	select {
	case <-time.After(200 * time.Millisecond):
	case <-r.ctx.Done():
		return 0, r.ctx.Err()
	}
	b[0] = r.s[0]
	r.s = r.s[1:]
	return 1, nil
}

func (o *trickleOrigin) Fetch(ctx context.Context, fr proxy.FetchRequest) (proxy.Result, error) {
	o.fetches.Add(1)
	v := o.version.Load()
	h := http.Header{"Cache-Control": {"public, max-age=600"}, "Content-Type": {"text/plain"}}
	body := "v" + string(rune('0'+v)) + " " + fr.Req.URL.Path + strings.Repeat(".", 20)
	var rd io.Reader = strings.NewReader(body)
	if sp := o.slowPath.Load(); sp != nil && *sp == fr.Req.URL.Path && v == 1 {
		rd = &trickleReader{s: body, ctx: ctx}
	}
	return proxy.Result{Resp: &http.Response{StatusCode: 200, Header: h, Body: io.NopCloser(rd), ContentLength: int64(len(body))}, Keep: true}, nil
}

// TestAHeldFillIsNotJoinedAfterTheRound: a peer P purged early fills a page
// from its home H, purged last, during the round: P's hold keeps P from
// storing the old copy, but P's fill stays joinable while its body streams.
// Once the purge has returned (every peer purged), a request at the
// sending node A climbs through P (the page is hot at A: a tree path),
// joins P's fill and gets the old copy from a peer; A's hold has ended, so
// A stores it, for good.
func TestAHeldFillIsNotJoinedAfterTheRound(t *testing.T) {
	const pt = 500 * time.Millisecond
	o := &trickleOrigin{}
	o.version.Store(1)
	// hot threshold 2: a page's first request at a node is cold (climbs to
	// the home), its second is hot (a tree path).
	nodes := startRealNodesHot(t, []string{"N1", "N2", "N3", "N4"}, routing.ModeHybrid, 2, pt, o, 2)
	any := nodes["N1"]
	const p = "/doc/slow"
	r := rankingOf(any, p)
	// With 4 nodes, arity 2: leaves are ranks 3 and 4; rank 3's path is
	// [ranking[1], home], rank 4's is [ranking[2], home]. The ingress is
	// ranking[3], so its hot path always goes through P or Q.
	h, pp, q, a := nodes[r[0]], nodes[r[1]], nodes[r[2]], nodes[r[3]]
	t.Logf("ranking %v: H=%s P=%s Q=%s A=%s", r, h.id, pp.id, q.id, a.id)
	o.slowPath.Store(new(string))
	*o.slowPath.Load() = p

	// 1. A client at A asks for p (cold at A: climbs to H; H's fill from the
	// origin streams v1 slowly). A does not keep it (q-rule: first request).
	firstDone := make(chan string, 1)
	go func() { w := askWith(a, p); firstDone <- w.Body.String() }()
	time.Sleep(300 * time.Millisecond) // H's origin fill under way
	// 2. The page changes; the operator purges it at A. H is reached last
	// (within the bound).
	o.version.Store(2)
	release := make(chan struct{})
	reached := holdPurgesAt(h, release, 0)
	purged := purgeInBackground(t, a, proxy.PurgeRequest{URL: "http://site.example" + p}, a.ph.Purge)
	<-reached
	time.Sleep(100 * time.Millisecond) // P and Q have purged (and hold)
	// 3. Clients at P and Q ask for p during the round: each climbs to H
	// (cold there) and joins H's v1 fill. Their holds keep them from
	// storing it; their fills stream on.
	pDone, qDone := make(chan string, 1), make(chan string, 1)
	go func() { w := askWith(pp, p); pDone <- w.Body.String() }()
	go func() { w := askWith(q, p); qDone <- w.Body.String() }()
	time.Sleep(300 * time.Millisecond)
	// 4. H purges; the purge returns at A with every peer purged.
	close(release)
	if n := <-purged; n != 3 {
		t.Fatalf("peers purged: %d", n)
	}
	returned := time.Now()
	// 5. After the purge has returned: A's second request (hot: a tree path
	// through P or Q).
	w := askWith(a, p)
	t.Logf("A after the purge returned (took %v): %q, Cache-Status %q", time.Since(returned).Round(time.Millisecond), w.Body.String(), w.Header().Get("Cache-Status"))
	t.Logf("during the round: A first %q, P %q, Q %q", <-firstDone, <-pDone, <-qDone)
	w = askWith(a, p)
	t.Logf("A again: %q, Cache-Status %q", w.Body.String(), w.Header().Get("Cache-Status"))
	if strings.HasPrefix(w.Body.String(), "v1 ") {
		t.Errorf("after a purge that returned with every peer purged, A stores and answers the purged copy (joined a held fill at a peer)")
	}
	// Every node, once more.
	for _, n := range []*realNode{h, pp, q, a} {
		w := askWith(n, p)
		t.Logf("%s: %q, Cache-Status %q", n.id, w.Body.String(), w.Header().Get("Cache-Status"))
	}
}

// TestPeerHoldFollowsTheSendersBound: a peer's hold is 5 × its own
// cluster.peer_timeout + 1 s, the sender's round is bounded by 5 × the
// sender's. Nothing makes the nodes agree on peer_timeout (a rolling
// config change passes through mixed values), and the purge request does
// not carry the sender's bound: a peer with a shorter peer_timeout stops
// holding while the round is still on, refills from the home purged last,
// and keeps the purged copy after a purge that returned with every peer
// purged.
func TestPeerHoldFollowsTheSendersBound(t *testing.T) {
	o := &versionedOrigin{}
	o.version.Store(1)
	nodes := startRealNodes(t, []string{"N1", "N2", "N3"}, routing.ModeHybrid, 2, time.Second, o)
	const p = "/doc/mixed"
	r := rankingOf(nodes["N1"], p)
	h, a, pp := nodes[r[0]], nodes[r[1]], nodes[r[2]]
	// P runs with a shorter peer_timeout (a node already restarted with
	// the new value): hold 5 × 200 ms + 1 s = 2 s. A's bound: 5 × 1 s.
	pp.c.cfg.PeerTimeout = 200 * time.Millisecond
	if w := askWith(pp, p); w.Body.String() != "v1 "+p { // P's first request (q-rule: not kept); H keeps v1
		t.Fatalf("first: %q", w.Body.String())
	}
	o.version.Store(2)
	reached := holdPurgesAt(h, nil, 3*time.Second) // within A's header timeout (4 s) and bound (5 s)
	start := time.Now()
	purged := purgeInBackground(t, a, proxy.PurgeRequest{URL: "http://site.example" + p}, a.ph.Purge)
	<-reached
	time.Sleep(time.Until(start.Add(2300 * time.Millisecond))) // past P's hold, before H's purge
	w := askWith(pp, p)
	t.Logf("P at %v, during the round: %q, Cache-Status %q", time.Since(start).Round(time.Millisecond), w.Body.String(), w.Header().Get("Cache-Status"))
	noPurgedCopyAfter(t, pp, p, purged, 2, start)
}

// TestAnAdminClientsTimeoutDoesNotCutTheRound: node.purge passes the admin
// request's context to Cluster.Purge, so an admin client that gives up
// (a CMS webhook with a 1 s timeout, curl -m 1) cancels the fan-out: the
// sending node's hold ends at once, while a peer that already has the
// purge request purges later. In between the sender refills from that
// peer and keeps the purged copy for good, though the peer has purged.
func TestAnAdminClientsTimeoutDoesNotCutTheRound(t *testing.T) {
	a, h, _, p := purgeHoldLab(t, 500*time.Millisecond) // A has asked for p once; H holds v1; the origin is at v2
	release := make(chan struct{})
	reached := holdPurgesAt(h, release, 0)                                         // H is busy: its purge runs once it gets to it
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond) // the admin client's patience
	defer cancel()
	_, peers, err := a.c.Purge(ctx, proxy.PurgeRequest{URL: "http://site.example" + p}, a.ph.Purge)
	t.Logf("purge returned after the client gave up: peers %d, err %v", peers.Purged, err)
	<-reached
	w := askWith(a, p) // A's second request: kept (q-rule)
	t.Logf("A after the cut round: %q, Cache-Status %q", w.Body.String(), w.Header().Get("Cache-Status"))
	close(release)
	time.Sleep(200 * time.Millisecond) // H's purge handler runs
	if w := askWith(h, p); w.Body.String() != "v2 "+p {
		t.Fatalf("H did not purge: %q", w.Body.String())
	}
	w = askWith(a, p)
	t.Logf("A once H has purged too: %q, Cache-Status %q", w.Body.String(), w.Header().Get("Cache-Status"))
	if w.Body.String() == "v1 "+p {
		t.Errorf("every node has purged p, yet A keeps and answers the purged copy (refilled from H after its own hold was cut with the admin request)")
	}
}

// TestAnUnrelatedTagPurgeDoesNotStopKeeping: a tag purge that names no
// page held back, by the Age rule, every peer's page older than it, under
// every key, for ten minutes: each request at A went to the home.
func TestAnUnrelatedTagPurgeDoesNotStopKeeping(t *testing.T) {
	const pt = 250 * time.Millisecond // peers' hold: 5 × 250 ms + 1 s = 2.25 s
	a, h, _, p := purgeHoldLab(t, pt) // A asked p once; H holds v1 (no tags at all)
	start := time.Now()
	if _, peers, err := a.c.Purge(context.Background(), proxy.PurgeRequest{Tag: "no-page-has-this-tag"}, a.ph.Purge); err != nil || peers.Purged != 1 {
		t.Fatalf("purge: %d %v", peers.Purged, err)
	}
	// Past every hold (A's ended with the round, H's after 2.25 s), and past
	// the Age rule's 3 s slack.
	time.Sleep(time.Until(start.Add(4 * time.Second)))
	hits := 0
	for i := range 6 {
		w := askWith(a, p)
		cs := w.Header().Get("Cache-Status")
		t.Logf("request %d at A, %v after the tag purge: %q Age %q Cache-Status %q", i+2, time.Since(start).Round(time.Millisecond), w.Body.String(), w.Header().Get("Age"), cs)
		if strings.Contains(cs, "A; hit") {
			hits++
		}
		time.Sleep(500 * time.Millisecond)
	}
	t.Logf("held copies at A: %d; H's page was not named by the purge (H still answers it: %q)", a.c.PurgeHeldCopies(), askWith(h, p).Header().Get("Cache-Status"))
	if hits == 0 {
		t.Errorf("after a tag purge that names no page, A never keeps a peer's page older than the purge (every request goes to the home), %v after the round and every hold ended", time.Since(start).Round(time.Second))
	}
}

// taggedOrigin is versionedOrigin whose pages carry Surrogate-Key: t.
type taggedOrigin struct{ versionedOrigin }

func (o *taggedOrigin) Fetch(ctx context.Context, fr proxy.FetchRequest) (proxy.Result, error) {
	res, err := o.versionedOrigin.Fetch(ctx, fr)
	if err == nil {
		res.Resp.Header.Set("Surrogate-Key", "t other")
	}
	return res, err
}

// TestATagPurgeHoldsBackTheTaggedPage: a tag purge names a page by the
// tag its answer carries: while the purge is on its way to the home, a
// request at A takes the home's old copy, and A does not keep it.
func TestATagPurgeHoldsBackTheTaggedPage(t *testing.T) {
	o := &taggedOrigin{}
	o.version.Store(1)
	nodes := startRealNodes(t, []string{"A", "H"}, routing.ModeHybrid, 2, 500*time.Millisecond, o)
	a, h := nodes["A"], nodes["H"]
	p := pageHomedAt(t, a, "H", "/tagged/")
	if w := askWith(a, p); w.Body.String() != "v1 "+p || w.Header().Get("Surrogate-Key") != "t other" {
		t.Fatalf("first: %q, Surrogate-Key %q", w.Body.String(), w.Header().Get("Surrogate-Key"))
	}
	o.version.Store(2)
	release := make(chan struct{})
	reached := holdPurgesAt(h, release, 0)
	done := purgeInBackground(t, a, proxy.PurgeRequest{Tag: "t"}, a.ph.Purge)
	<-reached
	w := askWith(a, p) // the home's old copy, during the round
	t.Logf("during the round: %q, Cache-Status %q", w.Body.String(), w.Header().Get("Cache-Status"))
	close(release)
	if n := <-done; n != 1 {
		t.Fatalf("peers purged: %d", n)
	}
	if w := askWith(a, p); w.Body.String() != "v2 "+p {
		t.Errorf("after the tag purge returned: %q, Cache-Status %q (A kept the old copy)", w.Body.String(), w.Header().Get("Cache-Status"))
	}
}
