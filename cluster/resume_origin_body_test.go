package cluster

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/edgecache/edge/proxy"
)

type closeTracked struct {
	io.ReadCloser
	closed atomic.Bool
}

func (c *closeTracked) Close() error { c.closed.Store(true); return c.ReadCloser.Close() }

// TestBreakDuringRaceLeaksAnOriginBody: a stall starts a race; the
// stream then breaks while the race's origin request is in flight, so
// Read resumes from the origin too. The race wins first and sets next;
// Read then installs its own origin body; takeNextLocked replaces that
// body with next without closing it: an origin connection (and its
// goroutines) is held for ever, and the answer counts both ok and raced.
func TestBreakDuringRaceLeaksAnOriginBody(t *testing.T) {
	var calls atomic.Int32
	var rb atomic.Pointer[resumeBody]
	raceAsked, readFetching := make(chan struct{}), make(chan struct{})
	var second atomic.Pointer[closeTracked]
	fast := resumeOrigin(t, `"v1"`, new(int)).(proxy.FetcherFunc)
	origin := proxy.FetcherFunc(func(ctx context.Context, req *http.Request) (*http.Response, error) {
		switch calls.Add(1) {
		case 1: // the race: answers once Read is resuming too
			close(raceAsked)
			<-readFetching
			return fast(ctx, req)
		default: // Read's resume: answers once the race has set next
			close(readFetching)
			for {
				b := rb.Load()
				b.mu.Lock()
				set := b.next != nil
				b.mu.Unlock()
				if set {
					break
				}
				time.Sleep(time.Millisecond)
			}
			resp, err := fast(ctx, req)
			if err == nil {
				ct := &closeTracked{ReadCloser: resp.Body}
				second.Store(ct)
				resp.Body = ct
			}
			return resp, err
		}
	})
	c := resumeCluster(t, origin)
	peer := peerThat(t, `"v1"`, func(http.ResponseWriter) {
		<-raceAsked
		panic(http.ErrAbortHandler) // the stalled stream breaks
	})
	resp := askPeer(t, c, peer)
	rb.Store(resp.Body.(*resumeBody))
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || !bytes.Equal(body, resumePage) {
		t.Fatalf("%d bytes, err %v", len(body), err)
	}
	if ct := second.Load(); ct == nil || !ct.closed.Load() {
		t.Errorf("Read's origin body was never closed (leaked); outcomes ok=%v raced=%v",
			testutil.ToFloat64(c.metrics.Resumes.WithLabelValues("ok")), testutil.ToFloat64(c.metrics.Resumes.WithLabelValues("raced")))
	}
}
