package cluster

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/edgecache/edge/proxy"
)

// crawlingPeer sends the first half of resumePage, then the rest in 2 KiB
// pieces every gap: a stream that is never silent for long, as TCP's
// retransmissions make it on a lossy link.
func crawlingPeer(t *testing.T, gap time.Duration) *Peer {
	return peerThat(t, `"v1"`, func(w http.ResponseWriter) {
		rest := resumePage[len(resumePage)/2:]
		for len(rest) > 0 {
			time.Sleep(gap)
			n := min(2<<10, len(rest))
			if _, err := w.Write(rest[:n]); err != nil {
				return // the reader left (the origin took over)
			}
			_ = http.NewResponseController(w).Flush()
			rest = rest[n:]
		}
	})
}

// fetchCrawling asks p as the climb does, wraps the answer as for a link
// that is (or is not) lossy, and reads it whole.
func fetchCrawling(t *testing.T, c *Cluster, p *Peer, lossy bool) ([]byte, bool, error) {
	t.Helper()
	resp := askPeerOn(t, c, p, lossy)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return b, resumed(resp.Body), err
}

// TestCrawlOnALossyLinkIsRacedAgainstTheOrigin: a stream on a lossy link
// that is still arriving after resumeAfter, though never silent that long,
// is raced against the origin, and the origin's rest takes over: the
// client gets the exact page, marked resumed (never stored). The crawl's
// gaps (100 ms) are far below the stall limit, so without the crawl race
// the stream would have run its whole 6.4 s.
func TestCrawlOnALossyLinkIsRacedAgainstTheOrigin(t *testing.T) {
	ranged := 0
	c := resumeCluster(t, resumeOrigin(t, `"v1"`, &ranged))
	body, wasResumed, err := fetchCrawling(t, c, crawlingPeer(t, 100*time.Millisecond), true)
	if err != nil || !bytes.Equal(body, resumePage) || !wasResumed || ranged != 1 {
		t.Fatalf("%d bytes (exact: %v), resumed %v, Range requests %d, err %v", len(body), bytes.Equal(body, resumePage), wasResumed, ranged, err)
	}
	for outcome, want := range map[string]float64{"crawl_raced": 1, "raced": 0, "ok": 0} {
		if n := testutil.ToFloat64(c.metrics.Resumes.WithLabelValues(outcome)); n != want {
			t.Errorf("edge_peer_body_resumes_total{outcome=%s} %v, want %v", outcome, n, want)
		}
	}
}

// TestSlowStreamOnACleanLinkIsLeftAlone: the same crawl on a link without
// loss is not raced (a slow home relaying a slow origin must not send every
// ingress to the origin): the peer's own bytes, not resumed, no Range asked.
func TestSlowStreamOnACleanLinkIsLeftAlone(t *testing.T) {
	ranged := 0
	c := resumeCluster(t, resumeOrigin(t, `"v1"`, &ranged))
	// 64 pieces 80 ms apart: past resumeAfter (4 s) without a stall.
	body, wasResumed, err := fetchCrawling(t, c, crawlingPeer(t, 80*time.Millisecond), false)
	if err != nil || !bytes.Equal(body, resumePage) || wasResumed || ranged != 0 {
		t.Fatalf("%d bytes, resumed %v, Range requests %d, err %v", len(body), wasResumed, ranged, err)
	}
}

// TestCrawlThatEndsFirstKeepsItsBytes: when the crawling stream reaches its
// end while the origin is still being asked, the stream's bytes stand and
// the origin's late answer is dropped.
func TestCrawlThatEndsFirstKeepsItsBytes(t *testing.T) {
	asked := make(chan struct{}, 1)
	release := make(chan struct{})
	var ranged int
	fast := resumeOrigin(t, `"v1"`, &ranged).(proxy.FetcherFunc)
	slowOrigin := proxy.FetcherFunc(func(ctx context.Context, req *http.Request) (*http.Response, error) {
		asked <- struct{}{}
		<-release
		return fast(ctx, req)
	})
	c := resumeCluster(t, slowOrigin)
	p := peerThat(t, `"v1"`, func(w http.ResponseWriter) {
		rest := resumePage[len(resumePage)/2:]
		for len(rest) > 0 {
			n := min(1<<10, len(rest))
			select {
			case <-asked: // the crawl race began: finish the page
				n = len(rest)
			case <-time.After(100 * time.Millisecond):
			}
			if _, err := w.Write(rest[:n]); err != nil {
				return
			}
			_ = http.NewResponseController(w).Flush()
			rest = rest[n:]
		}
	})
	done := make(chan struct{})
	go func() {
		defer close(done)
		body, wasResumed, err := fetchCrawling(t, c, p, true)
		if err != nil || !bytes.Equal(body, resumePage) || wasResumed {
			t.Errorf("%d bytes, resumed %v, err %v", len(body), wasResumed, err)
		}
	}()
	<-done
	close(release)
	deadline := time.Now().Add(10 * time.Second)
	for testutil.ToFloat64(c.metrics.Resumes.WithLabelValues("stall_recovered")) != 1 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := testutil.ToFloat64(c.metrics.Resumes.WithLabelValues("crawl_raced")); n != 0 {
		t.Errorf("crawl_raced %v, want 0", n)
	}
	if n := testutil.ToFloat64(c.metrics.Resumes.WithLabelValues("stall_recovered")); n != 1 {
		t.Errorf("stall_recovered %v, want 1 (the origin's late rest dropped)", n)
	}
}
