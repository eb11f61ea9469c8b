package cluster

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/edgecache/edge/fdetect"
	"github.com/edgecache/edge/indicators"
	"github.com/edgecache/edge/proxy"
)

// smallPage is a page well below the whole-answer limit, like the 21 KB
// page a lossy link crawled over for 10 s in the fault lab.
var smallPage = bytes.Repeat([]byte("small page body "), 1300) // 20.8 KB

// wholeCluster is an ingress that reads peer answers whole up to limit;
// its stall limit (resumeAfter) is a second.
func wholeCluster(t *testing.T, origin proxy.Fetcher, limit int64) *Cluster {
	t.Helper()
	c, err := New(Config{
		NodeID: "n0", Listen: "127.0.0.1:0", Peers: map[string]string{"n1": "127.0.0.1:1"}, Secret: []byte("cluster-test-secret"),
		Period: 100 * time.Millisecond, Detector: "ml", Selection: SelectionFNA, Mode: mustMode("hybrid"), Arity: 4, Q: 2,
		HotThreshold: 3, PeerTimeout: 200 * time.Millisecond, PeerWholeBytes: limit, Indicator: indicators.DefaultFilterConfig(1000),
	}, origin, proxy.NewStore(1<<20, 4), NewMetrics(prometheus.NewRegistry()), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// smallPeerThat is a peer (a real peer handler, signing its answers) that
// sends the first half of page, then runs then (nil: sends the rest).
func smallPeerThat(t *testing.T, page []byte, then func(w http.ResponseWriter)) *Peer {
	t.Helper()
	peer := playing(newTestCluster(t, "hybrid", map[string]string{"n0": "127.0.0.1:1"}), "n1")
	h := peer.PeerHandler(ignoreInbound(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Encoding", "gzip") // as a peer that compressed on the fly: not resumable from the origin
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write(page[:len(page)/2])
		_ = http.NewResponseController(w).Flush()
		if then != nil {
			then(w)
			return
		}
		_, _ = w.Write(page[len(page)/2:])
	}), func(proxy.PurgeRequest) (int, error) { return 0, nil })
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return &Peer{ID: "n1", Addr: strings.TrimPrefix(srv.URL, "http://")}
}

// originServing answers every fetch with page from a real server, and
// signals asked (if not nil) at its first request.
func originServing(t *testing.T, page []byte, asked chan struct{}) proxy.Fetcher {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write(page)
	}))
	t.Cleanup(srv.Close)
	return proxy.FetcherFunc(func(ctx context.Context, req *http.Request) (*http.Response, error) {
		if asked != nil {
			close(asked)
			asked = nil
		}
		out := req.Clone(ctx)
		out.RequestURI = ""
		out.URL.Scheme, out.URL.Host = "http", strings.TrimPrefix(srv.URL, "http://")
		return http.DefaultTransport.RoundTrip(out)
	})
}

// settleFrom asks p as the climb does and settles its answer at the ingress.
func settleFrom(t *testing.T, c *Cluster, p *Peer) (proxy.Result, bool) {
	t.Helper()
	req, resp := climbPeer(t, c, p)
	return c.settle(context.Background(), proxy.FetchRequest{Key: "http://h/p/1", Req: req}, resp, p.ID)
}

func readResult(t *testing.T, res proxy.Result) []byte {
	t.Helper()
	defer res.Resp.Body.Close()
	b, err := io.ReadAll(res.Resp.Body)
	if err != nil {
		t.Fatalf("reading the result: %v", err)
	}
	return b
}

func wantWhole(t *testing.T, c *Cluster, outcome string) {
	t.Helper()
	for _, o := range wholeOutcomes {
		want := 0.0
		if o == outcome {
			want = 1
		}
		if n := testutil.ToFloat64(c.metrics.WholeAnswers.WithLabelValues(o)); n != want {
			t.Errorf("edge_peer_answers_whole_total{outcome=%s} %v, want %v", o, n, want)
		}
	}
}

// TestSmallPeerAnswerIsReadWhole: a small answer comes from memory, whole,
// from the peer, and may be stored (nothing was spliced).
func TestSmallPeerAnswerIsReadWhole(t *testing.T) {
	c := wholeCluster(t, originServing(t, []byte("origin"), nil), 128<<10)
	res, ok := settleFrom(t, c, smallPeerThat(t, smallPage, nil))
	if !ok || res.From != proxy.UpstreamPeer || res.Addr != "n1" || res.Resumed != nil {
		t.Fatalf("ok %v, from %q %q, resumed %v", ok, res.From, res.Addr, res.Resumed != nil)
	}
	if b := readResult(t, res); !bytes.Equal(b, smallPage) {
		t.Fatalf("%d bytes, want the page's %d", len(b), len(smallPage))
	}
	if res.Resp.Header.Get("Content-Encoding") != "gzip" {
		t.Error("the peer's header was not kept")
	}
	if res.Resp.ContentLength != int64(len(smallPage)) {
		t.Errorf("ContentLength %d, want the body's %d", res.Resp.ContentLength, len(smallPage))
	}
	wantWhole(t, c, "whole")
}

// TestWholeHEADAnswerKeepsItsLength: a HEAD answer has no body; its length
// is the representation's, never the empty body's.
func TestWholeHEADAnswerKeepsItsLength(t *testing.T) {
	c := wholeCluster(t, originServing(t, []byte("origin"), nil), 128<<10)
	peer := playing(newTestCluster(t, "hybrid", map[string]string{"n0": "127.0.0.1:1"}), "n1")
	srv := httptest.NewServer(peer.PeerHandler(ignoreInbound(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "20800")
		w.WriteHeader(http.StatusOK)
	}), func(proxy.PurgeRequest) (int, error) { return 0, nil }))
	t.Cleanup(srv.Close)
	req := httptest.NewRequest("HEAD", "http://h/p/1", nil)
	req.RequestURI = ""
	resp, ok, _ := c.climbTo(context.Background(), req, "", &Peer{ID: "n1", Addr: strings.TrimPrefix(srv.URL, "http://")}, 2, nil, 0, proxy.WaitOrder{})
	if !ok {
		t.Fatal("the peer did not answer")
	}
	res, ok := c.settle(context.Background(), proxy.FetchRequest{Key: "http://h/p/1", Req: req}, resp, "n1")
	if !ok {
		t.Fatal("the HEAD answer was not settled")
	}
	if res.Resp.ContentLength == 0 {
		t.Errorf("a HEAD answer's length became its empty body's")
	}
	if b := readResult(t, res); len(b) != 0 {
		t.Errorf("a HEAD answer with %d body bytes", len(b))
	}
}

// TestSmallPeerAnswerCutMidwayIsAFailedHop: an answer that breaks half way
// sends nothing to the client; the caller goes on (the origin, here).
func TestSmallPeerAnswerCutMidwayIsAFailedHop(t *testing.T) {
	c := wholeCluster(t, originServing(t, []byte("origin"), nil), 128<<10)
	res, ok := settleFrom(t, c, smallPeerThat(t, smallPage, func(http.ResponseWriter) { panic(http.ErrAbortHandler) }))
	if ok || res.Resp != nil {
		t.Fatalf("a cut answer was handed on: ok %v", ok)
	}
	wantWhole(t, c, "failed")
}

// TestClimbGoesOnPastACutSmallAnswer: through the climb, the client gets the
// origin's whole page, never the peer's half (the fault lab's cut body).
func TestClimbGoesOnPastACutSmallAnswer(t *testing.T) {
	c := wholeCluster(t, originServing(t, smallPage, nil), 128<<10)
	p := smallPeerThat(t, smallPage, func(http.ResponseWriter) { panic(http.ErrAbortHandler) })
	c.addPeer("n1", p.Addr)
	c.peers["n1"].trusted, c.peers["n1"].member = true, true
	req := httptest.NewRequest("GET", "http://h/p/1", nil)
	req.RequestURI = ""
	res, _, err := c.climb(context.Background(), proxy.FetchRequest{Key: "http://h/p/1", Req: req}, 1, []hop{{"n1", 2}}, 0, false)
	if err != nil {
		t.Fatal(err)
	}
	if b := readResult(t, res); !bytes.Equal(b, smallPage) || res.From == proxy.UpstreamPeer {
		t.Fatalf("%d bytes from %q, want the origin's whole page", len(b), res.From)
	}
	if n := testutil.ToFloat64(c.metrics.ClimbHops.WithLabelValues("failover")); n != 1 {
		t.Errorf("edge_climb_hops_total{outcome=failover} %v, want 1", n)
	}
}

// TestCrawlingSmallAnswerIsRacedAndTheOriginWins: an answer still arriving
// after the stall limit (a lossy link's retransmission backoff) is raced
// against the origin; the origin answers while the peer is still silent,
// and the client gets the origin's page with nothing of the peer's. The
// order is set by events: the peer stays silent until the test ends.
func TestCrawlingSmallAnswerIsRacedAndTheOriginWins(t *testing.T) {
	asked := make(chan struct{})
	c := wholeCluster(t, originServing(t, []byte("the origin's page"), asked), 128<<10)
	stop := make(chan struct{})
	defer close(stop)
	start := time.Now()
	res, ok := settleFrom(t, c, smallPeerThat(t, smallPage, func(http.ResponseWriter) { <-stop }))
	if !ok || res.From == proxy.UpstreamPeer {
		t.Fatalf("ok %v, from %q", ok, res.From)
	}
	if b := readResult(t, res); string(b) != "the origin's page" {
		t.Fatalf("got %q", b)
	}
	if d := time.Since(start); d >= c.peerBodyIdle() {
		t.Errorf("the crawl was waited out (%v), not raced", d)
	}
	wantWhole(t, c, "race_origin")
}

// TestCrawlingSmallAnswerThatFinishesFirstIsServed: the peer sends the rest
// once the origin was asked, and the origin never answers until cancelled:
// the peer's whole answer is served and the origin's request is cancelled.
func TestCrawlingSmallAnswerThatFinishesFirstIsServed(t *testing.T) {
	asked, cancelled := make(chan struct{}), make(chan struct{})
	origin := proxy.FetcherFunc(func(ctx context.Context, req *http.Request) (*http.Response, error) {
		close(asked)
		<-ctx.Done()
		close(cancelled)
		return nil, ctx.Err()
	})
	c := wholeCluster(t, origin, 128<<10)
	res, ok := settleFrom(t, c, smallPeerThat(t, smallPage, func(w http.ResponseWriter) {
		<-asked
		_, _ = w.Write(smallPage[len(smallPage)/2:])
	}))
	if !ok || res.From != proxy.UpstreamPeer {
		t.Fatalf("ok %v, from %q", ok, res.From)
	}
	if b := readResult(t, res); !bytes.Equal(b, smallPage) {
		t.Fatalf("%d bytes, want the page's %d", len(b), len(smallPage))
	}
	select {
	case <-cancelled:
	case <-time.After(10 * time.Second):
		t.Fatal("the origin's request was not cancelled")
	}
	wantWhole(t, c, "race_peer")
}

// TestCrawlingAnswerThatBreaksWhileTheOriginFails: both sources fail: a
// failed hop, nothing handed on.
func TestCrawlingAnswerThatBreaksWhileTheOriginFails(t *testing.T) {
	asked, failed := make(chan struct{}), make(chan struct{})
	origin := proxy.FetcherFunc(func(ctx context.Context, req *http.Request) (*http.Response, error) {
		close(asked)
		defer close(failed)
		return nil, errors.New("origin down")
	})
	c := wholeCluster(t, origin, 128<<10)
	res, ok := settleFrom(t, c, smallPeerThat(t, smallPage, func(http.ResponseWriter) {
		<-asked
		<-failed
		panic(http.ErrAbortHandler)
	}))
	if ok || res.Resp != nil {
		t.Fatalf("ok %v with both sources failed", ok)
	}
	wantWhole(t, c, "failed")
}

// TestLargeAnswerStreamsAndStillResumes: past the limit the answer streams
// from the bytes read ahead, and a break after that is resumed from the
// origin at the right offset (resume counts the read-ahead bytes).
func TestLargeAnswerStreamsAndStillResumes(t *testing.T) {
	ranged := 0
	c := wholeCluster(t, resumeOrigin(t, `"v1"`, &ranged), 64<<10)
	res, ok := settleFrom(t, c, brokenPeer(t, `"v1"`)) // 128 KiB, then a break
	if !ok || res.From != proxy.UpstreamPeer || res.Resumed == nil {
		t.Fatalf("ok %v, from %q, resumable %v", ok, res.From, res.Resumed != nil)
	}
	if b := readResult(t, res); !bytes.Equal(b, resumePage) {
		t.Fatalf("%d bytes, want the page's %d", len(b), len(resumePage))
	}
	if !res.Resumed() || ranged != 1 {
		t.Errorf("resumed %v, Range requests %d", res.Resumed(), ranged)
	}
	wantWhole(t, c, "streamed")
}

// TestTamperedSmallAnswerIsNeverHandedOn: a relay that changes one byte
// of the body (the header MAC still matches) makes the body MAC fail at its
// end; read whole, the answer is a failed hop, not a page for a client.
func TestTamperedSmallAnswerIsNeverHandedOn(t *testing.T) {
	c := wholeCluster(t, originServing(t, []byte("origin"), nil), 128<<10)
	p := smallPeerThat(t, smallPage, nil)
	target, _ := url.Parse("http://" + p.Addr)
	relay := &httputil.ReverseProxy{Rewrite: func(pr *httputil.ProxyRequest) {
		pr.SetURL(target)
		pr.Out.Host = pr.In.Host // the request MAC covers it
	}, Transport: &http.Transport{DisableCompression: true}} // and its headers
	relay.ModifyResponse = func(resp *http.Response) error {
		resp.Body = &flipFirstByte{ReadCloser: resp.Body}
		return nil
	}
	srv := httptest.NewServer(relay)
	t.Cleanup(srv.Close)
	res, ok := settleFrom(t, c, &Peer{ID: "n1", Addr: strings.TrimPrefix(srv.URL, "http://")})
	if ok || res.Resp != nil {
		t.Fatalf("a tampered answer was handed on: ok %v", ok)
	}
	wantWhole(t, c, "failed")
}

type flipFirstByte struct {
	io.ReadCloser
	done bool
}

func (f *flipFirstByte) Read(p []byte) (int, error) {
	n, err := f.ReadCloser.Read(p)
	if n > 0 && !f.done {
		p[0] ^= 1
		f.done = true
	}
	return n, err
}

// TestMidClimbStreams: a node in the middle of a climb relays the answer
// as it comes (its own body MAC covers it downstream); only the ingress
// reads whole.
func TestMidClimbStreams(t *testing.T) {
	c := wholeCluster(t, originServing(t, []byte("origin"), nil), 128<<10)
	p := smallPeerThat(t, smallPage, nil)
	req := httptest.NewRequest("GET", "http://h/p/1", nil)
	req.RequestURI = ""
	resp, ok, _ := c.climbTo(context.Background(), req, "", p, 2, nil, 0, proxy.WaitOrder{})
	if !ok {
		t.Fatal("the peer did not answer")
	}
	res, ok := c.settle(context.Background(), proxy.FetchRequest{Key: "http://h/p/1", Req: req, Route: &route{}}, resp, "n1")
	if !ok || !bytes.Equal(readResult(t, res), smallPage) {
		t.Fatal("the mid-climb answer was not relayed")
	}
	wantWhole(t, c, "")
}

// TestCrawlingAnswerThatBreaksIsReplacedByTheOrigin: the stream breaks
// after the origin was asked; whichever comes first (the break or the
// origin's answer), the client gets the origin's whole page.
func TestCrawlingAnswerThatBreaksIsReplacedByTheOrigin(t *testing.T) {
	asked := make(chan struct{})
	c := wholeCluster(t, originServing(t, []byte("the origin's page"), asked), 128<<10)
	res, ok := settleFrom(t, c, smallPeerThat(t, smallPage, func(http.ResponseWriter) {
		<-asked
		panic(http.ErrAbortHandler)
	}))
	if !ok || res.From == proxy.UpstreamPeer || res.Retries != 1 {
		t.Fatalf("ok %v, from %q, retries %d", ok, res.From, res.Retries)
	}
	if b := readResult(t, res); string(b) != "the origin's page" {
		t.Fatalf("got %q", b)
	}
	wantWhole(t, c, "race_origin")
}

// trickler is a peer answer that sends page in 40 pieces, one every 100 ms
// (4 s in all, never silent for the 1 s stall limit), as a home relaying a
// slow origin does, or a lossy link's TCP crawls.
func trickler(page []byte, stop <-chan struct{}) func(w http.ResponseWriter) {
	return func(w http.ResponseWriter) {
		rest := page[len(page)/2:]
		step := len(rest)/40 + 1
		for len(rest) > 0 {
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
			n := min(step, len(rest))
			_, _ = w.Write(rest[:n])
			_ = http.NewResponseController(w).Flush()
			rest = rest[n:]
		}
	}
}

// TestSlowSteadyAnswerOnACleanLinkIsNotRaced: an answer that takes longer
// than the stall limit but never goes silent, on a link without loss, is
// most likely the home relaying a slow origin: the origin is not asked
// (the home's shield holds) and the peer's page is served.
func TestSlowSteadyAnswerOnACleanLinkIsNotRaced(t *testing.T) {
	var asked atomic.Int32
	origin := proxy.FetcherFunc(func(ctx context.Context, req *http.Request) (*http.Response, error) {
		asked.Add(1)
		return nil, errors.New("the origin was asked")
	})
	c := wholeCluster(t, origin, 128<<10)
	start := time.Now()
	res, ok := settleFrom(t, c, smallPeerThat(t, smallPage, trickler(smallPage, nil)))
	if !ok || res.From != proxy.UpstreamPeer || !bytes.Equal(readResult(t, res), smallPage) {
		t.Fatalf("ok %v, from %q", ok, res.From)
	}
	if time.Since(start) < c.resumeAfter() {
		t.Fatalf("the answer took %v, not longer than the stall limit: the test shows nothing", time.Since(start))
	}
	if n := asked.Load(); n != 0 {
		t.Errorf("the origin was asked %d times for a steady answer on a clean link", n)
	}
	wantWhole(t, c, "whole")
}

// TestCrawlOnALossyLinkIsRaced: the same steady crawl on a link whose
// heartbeats show loss is raced against the origin at the stall limit,
// and the origin's page is served.
func TestCrawlOnALossyLinkIsRaced(t *testing.T) {
	c := wholeCluster(t, originServing(t, []byte("the origin's page"), nil), 128<<10)
	inner, err := fdetect.New("chen", int64(100*time.Millisecond), nil)
	if err != nil {
		t.Fatal(err)
	}
	lossy := fdetect.NewLossAware(inner, int64(100*time.Millisecond), 1e-7)
	for seq := uint64(1); seq <= 200; seq += 2 { // every other heartbeat lost
		lossy.Observe(seq, int64(seq)*int64(100*time.Millisecond))
	}
	if lossy.Loss() < lossyLinkShare {
		t.Fatalf("the detector measured loss %v", lossy.Loss())
	}
	c.mu.Lock()
	c.peers["n1"].det = lossy
	c.mu.Unlock()
	stop := make(chan struct{})
	defer close(stop)
	res, ok := settleFrom(t, c, smallPeerThat(t, smallPage, trickler(smallPage, stop)))
	if !ok || res.From == proxy.UpstreamPeer {
		t.Fatalf("ok %v, from %q", ok, res.From)
	}
	if b := readResult(t, res); string(b) != "the origin's page" {
		t.Fatalf("got %q", b)
	}
	wantWhole(t, c, "race_origin")
}

// TestOriginServerErrorDoesNotTakeOver: an origin that answers the race
// with a 503 is not served in place of a peer's answer; the peer's page is.
func TestOriginServerErrorDoesNotTakeOver(t *testing.T) {
	asked := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	t.Cleanup(srv.Close)
	origin := proxy.FetcherFunc(func(ctx context.Context, req *http.Request) (*http.Response, error) {
		defer close(asked)
		out := req.Clone(ctx)
		out.RequestURI = ""
		out.URL.Scheme, out.URL.Host = "http", strings.TrimPrefix(srv.URL, "http://")
		return http.DefaultTransport.RoundTrip(out)
	})
	c := wholeCluster(t, origin, 128<<10)
	res, ok := settleFrom(t, c, smallPeerThat(t, smallPage, func(w http.ResponseWriter) {
		<-asked // silent until the origin has answered its 503
		_, _ = w.Write(smallPage[len(smallPage)/2:])
	}))
	if !ok || res.From != proxy.UpstreamPeer || !bytes.Equal(readResult(t, res), smallPage) {
		t.Fatalf("ok %v, from %q: the origin's 503 took over", ok, res.From)
	}
	wantWhole(t, c, "race_peer")
}

// testBudget is a byte budget like the proxy handler's (limits.max_buffered_bytes).
type testBudget struct {
	limit int64
	held  atomic.Int64
}

func (b *testBudget) Charge(n int64) bool {
	if b.held.Add(n) > b.limit {
		b.held.Add(-n)
		return false
	}
	return true
}
func (b *testBudget) Release(n int64) { b.held.Add(-n) }

// TestReadAheadIsChargedAndReleased: the read-ahead holds budget while the
// answer is served and gives all of it back when the body is closed, and
// a cut answer gives it back at once.
func TestReadAheadIsChargedAndReleased(t *testing.T) {
	c := wholeCluster(t, originServing(t, []byte("origin"), nil), 128<<10)
	b := &testBudget{limit: 1 << 20}
	c.SetBufferBudget(b)
	res, ok := settleFrom(t, c, smallPeerThat(t, smallPage, nil))
	if !ok {
		t.Fatal("not settled")
	}
	if held := b.held.Load(); held < int64(len(smallPage)) {
		t.Errorf("%d bytes charged while a %d-byte answer is held", held, len(smallPage))
	}
	if !bytes.Equal(readResult(t, res), smallPage) {
		t.Fatal("wrong body")
	}
	_ = res.Resp.Body.Close() // a second close gives nothing back twice
	if held := b.held.Load(); held != 0 {
		t.Errorf("%d bytes still charged after the body was closed", held)
	}
	if _, ok := settleFrom(t, c, smallPeerThat(t, smallPage, func(http.ResponseWriter) { panic(http.ErrAbortHandler) })); ok {
		t.Fatal("a cut answer was settled")
	}
	if held := b.held.Load(); held != 0 {
		t.Errorf("%d bytes still charged after a cut answer", held)
	}
}

// TestReadAheadWithoutBudgetStreams: with no budget left for the whole
// answer, what was read streams on (with resume) instead of growing past
// the budget; the client still gets every byte.
func TestReadAheadWithoutBudgetStreams(t *testing.T) {
	c := wholeCluster(t, originServing(t, []byte("origin"), nil), 128<<10)
	b := &testBudget{limit: readAheadStep} // one step: the 20.8 KB page fits, a second step does not
	c.SetBufferBudget(b)
	page := bytes.Repeat([]byte("0123456789abcdef"), 4<<10) // 64 KiB
	res, ok := settleFrom(t, c, smallPeerThat(t, page, nil))
	if !ok || !bytes.Equal(readResult(t, res), page) {
		t.Fatal("the answer was not served whole")
	}
	if held := b.held.Load(); held != 0 {
		t.Errorf("%d bytes still charged", held)
	}
	wantWhole(t, c, "streamed")
}
