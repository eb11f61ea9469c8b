package cluster

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/edgecache/edge/indicators"
	"github.com/edgecache/edge/proxy"
)

var resumePage = bytes.Repeat([]byte("0123456789abcdef"), 16<<10) // 256 KiB

// resumeOrigin serves resumePage with etag, Range and If-Range, as an
// origin does (http.ServeContent), and counts the requests with a Range.
func resumeOrigin(t *testing.T, etag string, ranged *int) proxy.Fetcher {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Range") != "" {
			*ranged++
		}
		w.Header().Set("Etag", etag)
		http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(resumePage))
	}))
	t.Cleanup(srv.Close)
	return proxy.FetcherFunc(func(ctx context.Context, req *http.Request) (*http.Response, error) {
		out := req.Clone(ctx)
		out.RequestURI = ""
		out.URL.Scheme, out.URL.Host = "http", strings.TrimPrefix(srv.URL, "http://")
		return http.DefaultTransport.RoundTrip(out)
	})
}

// brokenPeer is a peer (a real peer handler, signing its answers) that
// sends the first half of resumePage and then aborts the connection (as a
// suspicion, a crash or the idle limit ends the stream).
func brokenPeer(t *testing.T, etag string) *Peer { return peerThat(t, etag, nil) }

// peerThat is a peer that sends the first half of resumePage, then runs
// then (nil: aborts the connection; else whatever then does, e.g. stall
// and send the rest).
func peerThat(t *testing.T, etag string, then func(w http.ResponseWriter)) *Peer {
	t.Helper()
	peer := playing(newTestCluster(t, "hybrid", map[string]string{"n0": "127.0.0.1:1"}), "n1")
	h := peer.PeerHandler(ignoreInbound(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Etag", etag)
		w.Header().Set("Content-Length", "262144")
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write(resumePage[:len(resumePage)/2])
		_ = http.NewResponseController(w).Flush()
		if then != nil {
			then(w)
			return
		}
		panic(http.ErrAbortHandler)
	}), func(proxy.PurgeRequest) (int, error) { return 0, nil })
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return &Peer{ID: "n1", Addr: strings.TrimPrefix(srv.URL, "http://")}
}

func resumeCluster(t *testing.T, origin proxy.Fetcher) *Cluster {
	t.Helper()
	reg := prometheus.NewRegistry()
	c, err := New(Config{
		NodeID: "n0", Listen: "127.0.0.1:0", Peers: map[string]string{"n1": "127.0.0.1:1"}, Secret: []byte("cluster-test-secret"),
		Period: 100 * time.Millisecond, Detector: "ml", Selection: SelectionFNA, Mode: mustMode("hybrid"), Arity: 4, Q: 2,
		// A second: a loaded CI machine must not lose the peer's header.
		HotThreshold: 3, PeerTimeout: time.Second, Indicator: indicators.DefaultFilterConfig(1000),
	}, origin, proxy.NewStore(1<<20, 4), NewMetrics(reg), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// climbPeer asks p for /p/1 as the climb does, and returns the request
// and p's answer.
func climbPeer(t *testing.T, c *Cluster, p *Peer) (*http.Request, *http.Response) {
	t.Helper()
	req := httptest.NewRequest("GET", "http://h/p/1", nil)
	req.RequestURI = ""
	resp, ok, _ := c.climbTo(context.Background(), req, "", p, 2, nil, 0, proxy.WaitOrder{})
	if !ok {
		t.Fatal("the peer did not answer")
	}
	return req, resp
}

// askPeer asks p as the climb does; the answer's body resumes.
func askPeer(t *testing.T, c *Cluster, p *Peer) *http.Response {
	t.Helper()
	return askPeerOn(t, c, p, false)
}

// askPeerOn is askPeer on a link that is lossy or not: a crawl is raced
// only on a lossy one.
func askPeerOn(t *testing.T, c *Cluster, p *Peer, lossy bool) *http.Response {
	t.Helper()
	req, resp := climbPeer(t, c, p)
	c.withResume(context.Background(), proxy.FetchRequest{Key: "http://h/p/1", Req: req}, resp, lossy)
	return resp
}

// fetchFromPeer asks p as the climb does and reads the whole answer.
func fetchFromPeer(t *testing.T, c *Cluster, p *Peer) ([]byte, bool, error) {
	t.Helper()
	resp := askPeer(t, c, p)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return b, resumed(resp.Body), err
}

func resumed(b io.Reader) bool {
	r, ok := b.(interface{ Resumed() bool })
	return ok && r.Resumed()
}

func TestPeerBodyCutMidwayIsResumedFromTheOrigin(t *testing.T) {
	ranged := 0
	c := resumeCluster(t, resumeOrigin(t, `"v1"`, &ranged))
	body, wasResumed, err := fetchFromPeer(t, c, brokenPeer(t, `"v1"`))
	if err != nil || !bytes.Equal(body, resumePage) {
		t.Fatalf("%d bytes, err %v; want the whole page", len(body), err)
	}
	if !wasResumed || ranged != 1 {
		t.Errorf("resumed %v, origin Range requests %d", wasResumed, ranged)
	}
	if n := testutil.ToFloat64(c.metrics.Resumes.WithLabelValues("ok")); n != 1 {
		t.Errorf("edge_peer_body_resumes_total{outcome=ok} %v", n)
	}
}

// TestResumeNeedsTheSameRepresentation: when the origin's copy has changed
// (another entity tag), If-Range makes it send the whole new page, which
// must not be spliced onto the old bytes: the body fails as before.
func TestResumeNeedsTheSameRepresentation(t *testing.T) {
	ranged := 0
	c := resumeCluster(t, resumeOrigin(t, `"v2"`, &ranged))
	body, wasResumed, err := fetchFromPeer(t, c, brokenPeer(t, `"v1"`))
	if err == nil || wasResumed || len(body) >= len(resumePage) {
		t.Fatalf("spliced across representations: %d bytes, resumed %v, err %v", len(body), wasResumed, err)
	}
	if n := testutil.ToFloat64(c.metrics.Resumes.WithLabelValues("failed")); n != 1 {
		t.Errorf("edge_peer_body_resumes_total{outcome=failed} %v", n)
	}
}

// TestWeakOrMissingValidatorIsNotResumed: without a strong entity tag the
// bytes cannot be named, so nothing is resumed.
func TestWeakOrMissingValidatorIsNotResumed(t *testing.T) {
	for _, etag := range []string{`W/"v1"`, ""} {
		ranged := 0
		c := resumeCluster(t, resumeOrigin(t, etag, &ranged))
		_, wasResumed, err := fetchFromPeer(t, c, brokenPeer(t, etag))
		if err == nil || wasResumed || ranged != 0 {
			t.Fatalf("etag %q: resumed %v, Range requests %d, err %v", etag, wasResumed, ranged, err)
		}
	}
}

// TestStalledPeerBodyIsRacedAgainstTheOrigin: a peer stream that goes
// silent (a lossy link's retransmissions) is raced against the origin
// after resumeAfter; the origin's rest takes over while the stream is
// still silent, long before the stream's own idle limit.
func TestStalledPeerBodyIsRacedAgainstTheOrigin(t *testing.T) {
	ranged := 0
	c := resumeCluster(t, resumeOrigin(t, `"v1"`, &ranged))
	stop := make(chan struct{})
	defer close(stop)
	start := time.Now()
	body, wasResumed, err := fetchFromPeer(t, c, peerThat(t, `"v1"`, func(http.ResponseWriter) { <-stop }))
	if err != nil || !bytes.Equal(body, resumePage) || !wasResumed || ranged != 1 {
		t.Fatalf("%d bytes, resumed %v, Range requests %d, err %v", len(body), wasResumed, ranged, err)
	}
	if n := testutil.ToFloat64(c.metrics.Resumes.WithLabelValues("raced")); n != 1 {
		t.Errorf("edge_peer_body_resumes_total{outcome=raced} %v", n)
	}
	if d := time.Since(start); d >= c.peerBodyIdle() {
		t.Errorf("the stall was waited out (%v), not raced", d)
	}
}

// TestStreamThatRecoversKeepsItsBytes: a stream that stalls and then
// sends the rest itself, before the origin answers, is not switched. The
// peer sends the rest once the race has asked the origin, and the origin
// answers (with an error) only after that: no clock decides the order.
// TestRecoveredStreamIsNotSwitchedToAValidRest has the origin send a
// valid rest after the stream came back.
func TestStreamThatRecoversKeepsItsBytes(t *testing.T) {
	var ranged atomic.Int32
	asked, sent := make(chan struct{}), make(chan struct{})
	slowOrigin := proxy.FetcherFunc(func(ctx context.Context, req *http.Request) (*http.Response, error) {
		if ranged.Add(1) == 1 {
			close(asked)
		}
		select {
		case <-sent:
		case <-ctx.Done():
		}
		return nil, context.Canceled
	})
	c := resumeCluster(t, slowOrigin)
	body, wasResumed, err := fetchFromPeer(t, c, peerThat(t, `"v1"`, func(w http.ResponseWriter) {
		<-asked
		_, _ = w.Write(resumePage[len(resumePage)/2:])
		_ = http.NewResponseController(w).Flush()
		close(sent)
	}))
	if err != nil || !bytes.Equal(body, resumePage) || wasResumed {
		t.Fatalf("%d bytes, resumed %v, err %v", len(body), wasResumed, err)
	}
	if n := ranged.Load(); n != 1 {
		t.Errorf("origin asked %d times, want one race", n)
	}
}

// TestStreamThatStallsAgainIsRacedAgain: a stream that comes back during
// a race (which then fails) and stalls again is raced again; with one race
// per answer it waited out the idle limit and only then resumed (outcome
// ok, not raced). The order is set by events, not clocks.
func TestStreamThatStallsAgainIsRacedAgain(t *testing.T) {
	var ranged atomic.Int32
	asked, sent := make(chan struct{}), make(chan struct{})
	fast := resumeOrigin(t, `"v1"`, new(int)).(proxy.FetcherFunc)
	origin := proxy.FetcherFunc(func(ctx context.Context, req *http.Request) (*http.Response, error) {
		if ranged.Add(1) == 1 {
			close(asked)
			select { // the first race fails once the stream is back
			case <-sent:
			case <-ctx.Done():
			}
			return nil, context.Canceled
		}
		return fast(ctx, req)
	})
	c := resumeCluster(t, origin)
	stop := make(chan struct{})
	defer close(stop)
	body, wasResumed, err := fetchFromPeer(t, c, peerThat(t, `"v1"`, func(w http.ResponseWriter) {
		<-asked
		_, _ = w.Write(resumePage[len(resumePage)/2 : len(resumePage)/2+1000])
		_ = http.NewResponseController(w).Flush()
		close(sent)
		<-stop // and silent again
	}))
	if err != nil || !bytes.Equal(body, resumePage) || !wasResumed || ranged.Load() != 2 {
		t.Fatalf("%d bytes, resumed %v, Range requests %d, err %v", len(body), wasResumed, ranged.Load(), err)
	}
	for outcome, want := range map[string]float64{"failed": 1, "raced": 1, "ok": 0} {
		if n := testutil.ToFloat64(c.metrics.Resumes.WithLabelValues(outcome)); n != want {
			t.Errorf("edge_peer_body_resumes_total{outcome=%s} %v, want %v", outcome, n, want)
		}
	}
}
