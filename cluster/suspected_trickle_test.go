package cluster

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/edgecache/edge/proxy"
	"github.com/edgecache/edge/routing"
)

// TestSuspectedPeerTrickleIsResumedFromTheOrigin: a resumable answer (strong
// ETag) from a peer that, once suspected, trickles one byte every 400 ms
// (under cluster.peer_timeout, 1 s here: never silent). A suspected peer's
// stream may flow on for suspectedPeerGrace in all, then ends and the rest
// comes from the origin (resume.go); without that bound the trickle held
// the client for hours (128 KiB at 2.5 B/s).
func TestSuspectedPeerTrickleIsResumedFromTheOrigin(t *testing.T) {
	ranged := 0
	c := resumeCluster(t, resumeOrigin(t, `"v1"`, &ranged))
	stop := make(chan struct{})
	defer close(stop)
	p := peerThat(t, `"v1"`, func(w http.ResponseWriter) {
		rest := resumePage[len(resumePage)/2:]
		for i := range rest {
			select {
			case <-stop:
				return
			case <-time.After(400 * time.Millisecond):
			}
			if _, err := w.Write(rest[i : i+1]); err != nil {
				return
			}
			_ = http.NewResponseController(w).Flush()
		}
	})
	c.mu.Lock()
	peer := c.peers["n1"]
	peer.Addr = p.Addr
	peer.trusted = true
	c.mu.Unlock()
	resp := askPeer(t, c, peer)
	defer resp.Body.Close()
	if _, err := io.ReadFull(resp.Body, make([]byte, len(resumePage)/2)); err != nil {
		t.Fatal(err)
	}
	c.mu.Lock()
	c.setTrust(peer, false) // suspected: heartbeats stopped, the stream crawls
	c.mu.Unlock()
	done := make(chan error, 1)
	start := time.Now()
	go func() {
		_, err := io.ReadAll(resp.Body)
		done <- err
	}()
	select {
	case err := <-done:
		t.Logf("ended after %v: %v, origin ranges %d", time.Since(start), err, ranged)
	case <-time.After(c.suspectedPeerGrace() + 5*time.Second):
		t.Fatalf("a suspected peer trickling 1 byte / 400 ms still holds the client %v after the suspicion (origin range requests: %d); before 61c26b4 the suspicion cut it and the rest was resumed from the origin", time.Since(start), ranged)
	}
}

// TestSuspectedPeerTrickleBeforeTheHeaderFailsOver: a small answer is
// read whole at the ingress before its header goes to the client
// (whole.go). The peer sends its header and then trickles a byte every
// 200 ms (under peer_timeout, 300 ms). Suspected meanwhile, the peer's
// answer's trickle flows on for suspectedPeerGrace at most: then the hop
// fails and the climb goes on to the origin, with nothing yet sent to the
// client.
func TestSuspectedPeerTrickleBeforeTheHeaderFailsOver(t *testing.T) {
	o := &countingOrigin{}
	c := newPlanCluster(t, "n0", routing.ModeRing, SelectionOff, o)
	c.cfg.PeerWholeBytes = 128 << 10
	p1 := startFakePeer(t, "p1")
	stop := make(chan struct{})
	defer close(stop)
	p1.setAnswer(func(w http.ResponseWriter, _ *http.Request, _ *route) {
		w.Header().Set("Cache-Control", "max-age=60")
		w.WriteHeader(200)
		for range 1000 {
			_, _ = io.WriteString(w, "x")
			_ = http.NewResponseController(w).Flush()
			select {
			case <-stop:
				return
			case <-time.After(200 * time.Millisecond):
			}
		}
	})
	join(c, p1)
	path := keyHomedAt(t, c, "p1")
	req := httptest.NewRequest("GET", "http://site.example"+path, nil)
	req.RequestURI = ""
	type out struct {
		body string
		err  error
	}
	got := make(chan out, 1)
	go func() {
		res, err := c.Fetch(context.Background(), proxy.FetchRequest{Key: proxy.CacheKey("http", "site.example", path, ""), Req: req})
		if err != nil {
			got <- out{"", err}
			return
		}
		b, err := io.ReadAll(res.Resp.Body)
		res.Resp.Body.Close()
		got <- out{string(b), err}
	}()
	time.Sleep(600 * time.Millisecond)
	c.mu.Lock()
	c.setTrust(c.peers["p1"], false)
	c.mu.Unlock()
	start := time.Now()
	select {
	case r := <-got:
		t.Logf("after %v: %q %v (origin %d)", time.Since(start), r.body[:min(20, len(r.body))], r.err, o.n.Load())
	case <-time.After(c.suspectedPeerGrace() + 5*time.Second):
		t.Fatalf("a suspected peer trickling a small answer (read whole, no header to the client yet) holds the fetch %v after the suspicion; origin asked %d times", time.Since(start), o.n.Load())
	}
}
