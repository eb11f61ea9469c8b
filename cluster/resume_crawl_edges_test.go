package cluster

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/edgecache/edge/proxy"
)

// scriptedBody is a peer body whose reads are handed out one by one.
type scriptedBody struct {
	reads  chan scriptedRead
	closed chan struct{}
}

type scriptedRead struct {
	data []byte
	err  error
}

func newScripted() *scriptedBody {
	return &scriptedBody{reads: make(chan scriptedRead), closed: make(chan struct{})}
}

func (s *scriptedBody) Read(p []byte) (int, error) {
	r := <-s.reads // a read already in the kernel's hands: returns even if closed meanwhile
	return copy(p, r.data), r.err
}

func (s *scriptedBody) Close() error {
	select {
	case <-s.closed:
	default:
		close(s.closed)
	}
	return nil
}

func wrapScripted(t *testing.T, c *Cluster, body io.ReadCloser) *resumeBody {
	t.Helper()
	req := httptest.NewRequest("GET", "http://h/p/1", nil)
	req.RequestURI = ""
	resp := &http.Response{StatusCode: 200, Header: http.Header{"Etag": {`"v1"`}}, Body: body, ContentLength: -1}
	c.withResume(context.Background(), proxy.FetchRequest{Key: "http://h/p/1", Req: req}, resp, false)
	return resp.Body.(*resumeBody)
}

// startScripted wraps a scripted peer body for c and reads its first half
// of resumePage into buf (the page's size); n is how much came.
func startScripted(t *testing.T, c *Cluster) (peer *scriptedBody, b *resumeBody, buf []byte, n int) {
	t.Helper()
	peer = newScripted()
	b = wrapScripted(t, c, peer)
	go func() { peer.reads <- scriptedRead{data: resumePage[:len(resumePage)/2]} }()
	buf = make([]byte, len(resumePage))
	n, _ = io.ReadFull(b, buf[:len(resumePage)/2])
	return peer, b, buf, n
}

// gatedOrigin is resumeOrigin answering only once release is closed.
func gatedOrigin(t *testing.T, ranged *int, release chan struct{}) proxy.Fetcher {
	fast := resumeOrigin(t, `"v1"`, ranged).(proxy.FetcherFunc)
	return proxy.FetcherFunc(func(ctx context.Context, req *http.Request) (*http.Response, error) {
		<-release
		return fast(ctx, req)
	})
}

// TestSkipPastTheOriginsEndIsNoCleanEnd: a peer that sends more bytes
// than the origin's representation (same strong tag) while the crawl race
// is out: the client must not get a clean end after a body longer than the
// representation (found by a hostile review: it did).
func TestSkipPastTheOriginsEndIsNoCleanEnd(t *testing.T) {
	ranged := 0
	release := make(chan struct{})
	c := resumeCluster(t, gatedOrigin(t, &ranged, release))
	peer, b, buf, n := startScripted(t, c)
	defer b.Close()
	half := len(resumePage) / 2
	raced := make(chan struct{})
	go func() { b.race(true); close(raced) }() // at = half
	time.Sleep(50 * time.Millisecond)
	// Meanwhile the stream delivers 192 KiB more (64 KiB past the end).
	extra := append(append([]byte{}, resumePage[half:]...), bytes.Repeat([]byte("X"), 64<<10)...)
	go func() { peer.reads <- scriptedRead{data: extra} }()
	out := append([]byte{}, buf[:n]...)
	m, _ := io.ReadFull(b, make([]byte, len(extra)))
	out = append(out, extra[:m]...)
	close(release)
	<-raced
	rest, err := io.ReadAll(b)
	out = append(out, rest...)
	t.Logf("client got %d bytes (representation %d), err %v, resumed %v", len(out), len(resumePage), err, b.Resumed())
	if err == nil && len(out) != len(resumePage) {
		t.Errorf("a body of %d bytes ended cleanly; the representation has %d", len(out), len(resumePage))
	}
}

// TestStreamEndingAsTheCrawlRaceTakesOverWins: the stream's last read
// returns its bytes and io.EOF (MAC checked) just as the crawl race's answer
// is taken: the finished, verified stream stands (not marked resumed, so it
// may be stored), and the origin's rest is closed unread (found by a hostile
// review: the stream was marked resumed and the rest downloaded to be
// skipped).
func TestStreamEndingAsTheCrawlRaceTakesOverWins(t *testing.T) {
	ranged := 0
	c := resumeCluster(t, resumeOrigin(t, `"v1"`, &ranged))
	peer, b, buf, n := startScripted(t, c)
	defer b.Close()
	half := len(resumePage) / 2
	type res struct {
		n   int
		err error
	}
	lastRead := make(chan res)
	go func() { // the client's read is in body.Read (resume.go:140)
		k, err := b.Read(buf[n:])
		lastRead <- res{k, err}
	}()
	time.Sleep(50 * time.Millisecond)
	b.race(true) // the crawl timer: takes over (stream not ended yet)
	peer.reads <- scriptedRead{data: resumePage[half:], err: io.EOF}
	r := <-lastRead
	out := append([]byte{}, buf[:n+r.n]...)
	err := r.err
	if !errors.Is(err, io.EOF) { // the origin took over: read the rest
		var rest []byte
		rest, err = io.ReadAll(b)
		out = append(out, rest...)
	}
	t.Logf("exact %v, err %v, resumed %v, crawl_raced %v", bytes.Equal(out, resumePage), err, b.Resumed(),
		testutil.ToFloat64(c.metrics.Resumes.WithLabelValues("crawl_raced")))
	if !bytes.Equal(out, resumePage) || (err != nil && !errors.Is(err, io.EOF)) {
		t.Errorf("%d bytes, err %v", len(out), err)
	}
	if b.Resumed() {
		t.Errorf("a stream read to its verified end is marked resumed (the origin's %d-byte rest fetched and discarded)", len(resumePage)-half)
	}
}

// TestSlowReaderIsNoCrawl: a fast peer whose answer is wholly sent at once,
// read by a slow consumer (the fill paces itself to its client): only the
// time spent waiting for the peer's bytes counts as crawling, so the origin
// is not asked (found by a hostile review: the race fired on time since
// hand-over alone).
func TestSlowReaderIsNoCrawl(t *testing.T) {
	ranged := 0
	c := resumeCluster(t, resumeOrigin(t, `"v1"`, &ranged))
	sent := make(chan time.Time, 1)
	p := peerThat(t, `"v1"`, func(w http.ResponseWriter) {
		_, _ = w.Write(resumePage[len(resumePage)/2:])
		_ = http.NewResponseController(w).Flush()
		sent <- time.Now()
	})
	start := time.Now()
	resp := askPeerOn(t, c, p, true)
	defer resp.Body.Close()
	var out []byte
	buf := make([]byte, 4<<10)
	var err error
	for {
		var k int
		k, err = resp.Body.Read(buf)
		out = append(out, buf[:k]...)
		if err != nil {
			break
		}
		time.Sleep(80 * time.Millisecond) // the consumer's pace, not the link's
	}
	if errors.Is(err, io.EOF) {
		err = nil
	}
	t.Logf("peer sent all after %v; read took %v; exact %v err %v resumed %v ranged %d crawl_raced %v",
		(<-sent).Sub(start), time.Since(start), bytes.Equal(out, resumePage), err, resumed(resp.Body), ranged,
		testutil.ToFloat64(c.metrics.Resumes.WithLabelValues("crawl_raced")))
	if resumed(resp.Body) || ranged != 0 {
		t.Errorf("a stream the peer had finished sending was taken over by the origin")
	}
}
