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

// TestRecoveredStreamIsNotSwitchedToAValidRest: what
// TestStreamThatRecoversKeepsItsBytes claims, with an origin that does
// send a valid rest (206), only after the reader has taken bytes of the
// stream's own: the race must see the recovery and not switch.
func TestRecoveredStreamIsNotSwitchedToAValidRest(t *testing.T) {
	var rb atomic.Pointer[resumeBody]
	asked := make(chan struct{})
	var calls atomic.Int32
	fast := resumeOrigin(t, `"v1"`, new(int)).(proxy.FetcherFunc)
	origin := proxy.FetcherFunc(func(ctx context.Context, req *http.Request) (*http.Response, error) {
		if calls.Add(1) == 1 {
			close(asked)
			b := rb.Load()
			for { // the stream came back: the reader has more than the race's start
				b.mu.Lock()
				moved := b.got > int64(len(resumePage)/2)
				b.mu.Unlock()
				if moved {
					break
				}
				time.Sleep(time.Millisecond)
			}
		}
		return fast(ctx, req)
	})
	c := resumeCluster(t, origin)
	half := len(resumePage) / 2
	peer := peerThat(t, `"v1"`, func(w http.ResponseWriter) {
		<-asked
		_, _ = w.Write(resumePage[half : half+1000])
		_ = http.NewResponseController(w).Flush()
		for c.resumes[resumeRecovered].Load()+c.resumes[resumeRaced].Load() == 0 {
			time.Sleep(time.Millisecond) // the race has decided
		}
		_, _ = w.Write(resumePage[half+1000:])
	})
	resp := askPeer(t, c, peer)
	rb.Store(resp.Body.(*resumeBody))
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || !bytes.Equal(body, resumePage) || resumed(resp.Body) {
		t.Fatalf("%d bytes, resumed %v, err %v", len(body), resumed(resp.Body), err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for testutil.ToFloat64(c.metrics.Resumes.WithLabelValues("stall_recovered")) != 1 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := testutil.ToFloat64(c.metrics.Resumes.WithLabelValues("stall_recovered")); n != 1 {
		t.Errorf("stall_recovered %v, want 1", n)
	}
}
