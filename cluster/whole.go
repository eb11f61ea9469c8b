package cluster

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/edgecache/edge/fdetect"
	"github.com/edgecache/edge/proxy"
)

// At the ingress a small peer answer is read whole before its header goes
// to the client. Streamed, an answer that breaks or crawls mid-body (TCP's
// retransmission backoff on a lossy link, a crash, a suspicion that ends
// the peer's streams) leaves the client with part of a response; resume
// (resume.go) can finish it only when the origin holds the same bytes, and
// a peer that compressed the page on the fly has bytes the origin never
// had. Read whole, a failed answer is a failed hop (nothing was sent: the
// climb goes on), and the body MAC is checked before the first byte leaves.
//
// An answer that has been silent for resumeAfter (as resume.go races a
// stalled stream), or is still arriving after resumeAfter on a link whose
// heartbeats show loss (TCP's backoff there crawls without long silences),
// is raced against the origin: whichever is ready first is served and the
// other is closed; an origin that answers 5xx or fails does not take over.
// A slow answer on a clean link is left alone: it is most likely the home
// relaying a slow origin, and asking the origin from every ingress would
// undo the home's shield. Answers
// larger than Config.PeerWholeBytes stream as before (with resume) once
// that many bytes have come: holding a large body would delay its first
// byte by its whole transfer and cost memory per request.

// The outcomes of reading peer answers whole, as metric labels and
// status-page keys.
const (
	wholeRead       = iota // read whole in time
	wholeStreamed          // larger than the limit: streamed from there
	wholeFailed            // failed before a byte was sent: the climb went on
	wholeRacePeer          // stalled or crawling: raced, and the peer's answer was served
	wholeRaceOrigin        // stalled or crawling: raced, and the origin's answer was served
)

var wholeOutcomes = [...]string{"whole", "streamed", "failed", "race_peer", "race_origin"}

func (c *Cluster) countWhole(outcome int) {
	c.wholes[outcome].Add(1)
	c.metrics.WholeAnswers.WithLabelValues(wholeOutcomes[outcome]).Inc()
}

// WholeAnswers counts the peer answers read whole before their header went
// to the client, by outcome (for the status page).
func (c *Cluster) WholeAnswers() map[string]int64 {
	return outcomeCounts(wholeOutcomes[:], c.wholes[:])
}

// BufferBudget is the node's budget for response bytes held in memory
// (limits.max_buffered_bytes, kept by the proxy handler): a read-ahead is
// charged to it before its buffer grows.
type BufferBudget interface {
	Charge(n int64) bool // take n bytes if the budget has them
	Release(n int64)
}

// SetBufferBudget makes the read-ahead of peer answers charge b. The node
// calls it once, before serving (the handler that keeps the budget is made
// after the cluster); without it nothing is charged.
func (c *Cluster) SetBufferBudget(b BufferBudget) { c.budget = b }

// peerAnswer is what reading the start of a peer's answer found.
type peerAnswer struct {
	head    []byte // the bytes read
	more    bool   // the body goes on past head (larger than the limit, or no budget for more)
	charged int64  // bytes of head's buffer charged to the budget, released when the body is closed
	err     error  // the body failed (a break, a stall, a bad MAC)
}

// A read-ahead's buffer starts at readAheadFirst and doubles, growing by
// at most readAheadStep at a time: a small answer (most pages) costs one
// small buffer, and no large charge; a large one is not copied often.
// Starting at readAheadStep cost 32 KiB allocated and zeroed per peer
// answer (BenchmarkPeerHop).
const (
	readAheadFirst = 8 << 10
	readAheadStep  = 32 << 10
)

// readStart reads body up to limit bytes, and one more to learn whether it
// goes on. Each growth of the buffer is charged to b first (nil: none);
// when b refuses, what was read streams on as for a larger answer. On an
// error the charge is already released.
func (c *Cluster) readStart(body io.Reader, limit int64) peerAnswer {
	var a peerAnswer
	buf := []byte(nil)
	for {
		if len(buf) == cap(buf) {
			grow := min(int64(max(cap(buf), readAheadFirst)), readAheadStep, limit+1-int64(len(buf)))
			if b := c.budget; b != nil && !b.Charge(grow) {
				a.more = true // no room: stream from here
				break
			}
			a.charged += grow
			buf = append(make([]byte, 0, int64(cap(buf))+grow), buf...)
		}
		n, err := body.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if int64(len(buf)) > limit {
			a.more = true
			break
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			c.releaseAhead(a.charged)
			return peerAnswer{err: err}
		}
	}
	a.head = buf
	return a
}

// releaseAhead gives a read-ahead's charge back.
func (c *Cluster) releaseAhead(n int64) {
	if b := c.budget; b != nil && n > 0 {
		b.Release(n)
	}
}

// settle turns a peer's answer at the ingress into the request's result:
// read whole when small, else streamed (with resume), or the origin's
// answer when the peer's was too slow. ok is false when the peer's body
// failed before anything could be sent (the answer is closed): the caller
// goes on as for a failed hop. A mid-climb node (fr.Route set) streams, as
// resume does not apply there either.
func (c *Cluster) settle(ctx context.Context, fr proxy.FetchRequest, resp *http.Response, peer string) (proxy.Result, bool) {
	fromPeer := proxy.Result{Resp: resp, From: proxy.UpstreamPeer, Addr: peer}
	if c.cfg.PeerWholeBytes <= 0 || fr.Route != nil {
		fromPeer.Resumed = c.streamPeer(ctx, fr, resp, c.lossyLink(peer))
		return fromPeer, true
	}
	// The body is read on this goroutine (usually it is already in the
	// socket's buffer: a hand-off would cost more than the read); a timer
	// asks the origin if it stalls or crawls (slow).
	r := &wholeRace{c: c, ctx: ctx, fr: fr, body: resp.Body, lossy: c.lossyLink(peer), limit: c.resumeAfter()}
	r.progress.Store(time.Now().UnixNano())
	r.timer = time.AfterFunc(r.limit, r.slow)
	a := c.readStart(&progressReader{r: resp.Body, at: &r.progress}, c.cfg.PeerWholeBytes)
	r.timer.Stop()
	r.mu.Lock()
	r.peerDone, r.peerOK = true, a.err == nil
	asked, won := r.asked, r.won
	r.mu.Unlock()

	switch {
	case won != nil:
		// The origin answered first and cut the stream (whatever the read
		// then returned, the origin's answer is the one served).
		c.releaseAhead(a.charged)
		resp.Body.Close()
		return r.originResult(*won), true
	case a.err == nil:
		if asked != nil {
			r.ocancel() // its answer, if one comes, is closed by askOrigin
			c.countWhole(wholeRacePeer)
		} else if a.more {
			c.countWhole(wholeStreamed)
		} else {
			c.countWhole(wholeRead)
		}
		return c.peerResult(ctx, fr, resp, a, fromPeer, r.lossy), true
	}
	resp.Body.Close()
	if asked != nil {
		// The stream broke after the origin was asked: its answer decides.
		if o := <-asked; o.err == nil {
			return r.originResult(o.res), true
		}
	}
	c.countWhole(wholeFailed)
	return proxy.Result{}, false
}

// lossyLinkShare is the heartbeat loss on a peer's link above which an
// answer that is still arriving at the stall limit is raced although it is
// not silent: below it a lost segment is rare and fast retransmit repairs
// it in a round trip; above it retransmission timeouts chain (0.2, 0.4,
// 0.8 s …) and a small page can crawl for seconds.
const lossyLinkShare = 0.01

// lossyLink reports whether the link to peer shows heartbeat loss (the
// loss-aware margin's estimate; none without it, cluster.loss_budget 0).
func (c *Cluster) lossyLink(peer string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	p := c.peers[peer]
	return p != nil && p.lossy()
}

// lossy reports whether p's link shows heartbeat loss (see lossyLink).
// c.mu is held.
func (p *Peer) lossy() bool {
	la, ok := p.det.(*fdetect.LossAware)
	return ok && la.LostShare() >= lossyLinkShare
}

// progressReader records when its reader last gave bytes.
type progressReader struct {
	r  io.Reader
	at *atomic.Int64 // UnixNano of the last read that gave bytes
}

func (p *progressReader) Read(b []byte) (int, error) {
	n, err := p.r.Read(b)
	if n > 0 {
		p.at.Store(time.Now().UnixNano())
	}
	return n, err
}

// wholeRace is the race between a slow peer answer, read on the request's
// goroutine, and the origin, asked from a timer's.
type wholeRace struct {
	c        *Cluster
	ctx      context.Context
	fr       proxy.FetchRequest
	body     io.Closer // the peer's: closing it ends the read
	lossy    bool      // the peer's link shows loss: a crawl is raced too
	limit    time.Duration
	timer    *time.Timer
	progress atomic.Int64 // when the body last gave bytes (UnixNano)

	mu       sync.Mutex
	peerDone bool               // the read has ended: the origin can no longer take over
	peerOK   bool               // and it succeeded: the origin's answer is not wanted
	asked    chan originAnswer  // the origin was asked; its answer, if it did not take over
	won      *proxy.Result      // the origin's answer took over (the stream was cut)
	ocancel  context.CancelFunc // ends the origin's request
}

type originAnswer struct {
	res proxy.Result
	err error
}

// slow runs when the answer has been arriving for the stall limit: on a
// lossy link, or once the body has been silent that long, it asks the
// origin; else it looks again when the silence could reach the limit.
func (r *wholeRace) slow() {
	silent := time.Since(time.Unix(0, r.progress.Load()))
	if !r.lossy && silent < r.limit {
		r.timer.Reset(r.limit - silent)
		return
	}
	r.askOrigin()
}

// askOrigin asks the origin and, if the peer's answer is still arriving
// when the origin's comes (below 500), cuts the stream and takes over.
func (r *wholeRace) askOrigin() {
	r.mu.Lock()
	if r.peerDone {
		r.mu.Unlock()
		return
	}
	octx, ocancel := context.WithCancel(r.ctx)
	r.asked, r.ocancel = make(chan originAnswer, 1), ocancel
	r.mu.Unlock()
	res, err := r.c.origin.Fetch(octx, r.fr)
	if err == nil && res.Resp.StatusCode >= 500 {
		// A failing origin does not replace a peer's answer; the climb's
		// own failover decides what a 5xx is worth.
		res.Resp.Body.Close()
		err = errOriginServerError
	}
	r.mu.Lock()
	switch {
	case err == nil && !r.peerDone:
		res.Resp.Body = &cancelOnClose{ReadCloser: res.Resp.Body, cancel: ocancel}
		r.won = &res
		r.mu.Unlock()
		r.body.Close() // the blocked read returns
	case err == nil && r.peerOK:
		r.mu.Unlock()
		res.Resp.Body.Close() // the peer's answer is served
		ocancel()
	default:
		// An error, or the stream broke first: settle waits for this.
		r.mu.Unlock()
		if err != nil {
			ocancel()
		} else {
			res.Resp.Body = &cancelOnClose{ReadCloser: res.Resp.Body, cancel: ocancel}
		}
		r.asked <- originAnswer{res, err}
	}
}

// errOriginServerError is an origin that answered a race with a 5xx.
var errOriginServerError = errors.New("cluster: the origin answered the race with a server error")

// originResult is the result for the origin's answer that won the race.
func (r *wholeRace) originResult(res proxy.Result) proxy.Result {
	r.c.countWhole(wholeRaceOrigin)
	res.Keep = false // the caller decides, as for the climb's origin fetch
	res.Retries++    // the peer, for the access log
	return res
}

// peerResult is the result for a peer answer whose start a holds: the
// whole body from memory, or the start followed by the rest of the stream
// (whose crawl is raced when lossy: the link, as settle found it).
func (c *Cluster) peerResult(ctx context.Context, fr proxy.FetchRequest, resp *http.Response, a peerAnswer, res proxy.Result, lossy bool) proxy.Result {
	if !a.more {
		// Read to its end, the MAC checked. The peer's body is closed
		// with this one, as when it streamed: a probe winner's close ends
		// the other probes, whose later answers still teach fna-learned.
		resp.Body = &prefixedBody{Reader: bytes.NewReader(a.head), body: resp.Body, release: c.aheadRelease(a.charged)}
		// A peer's answer from net/http is chunked (its body MAC rides in
		// a trailer); read whole, its length is known, and the client gets
		// it as Content-Length. Not for HEAD, 204 or 304, whose length would
		// describe a body they do not carry.
		if resp.ContentLength < 0 && fr.Req.Method != http.MethodHead && resp.StatusCode >= 200 &&
			resp.StatusCode != http.StatusNoContent && resp.StatusCode != http.StatusNotModified {
			resp.ContentLength = int64(len(a.head))
		}
		res.InMemory = true
		return res
	}
	resp.Body = &prefixedBody{Reader: io.MultiReader(bytes.NewReader(a.head), resp.Body), body: resp.Body, release: c.aheadRelease(a.charged)}
	res.Resumed = c.streamPeer(ctx, fr, resp, lossy)
	return res
}

// prefixedBody is a body whose first bytes (or all) were read ahead; its
// close gives their charge back, once.
type prefixedBody struct {
	io.Reader
	body    io.Closer
	release func()
}

func (b *prefixedBody) Close() error {
	b.release()
	return b.body.Close()
}

// aheadRelease returns a function that releases a read-ahead's charge of
// n bytes the first time it is called.
func (c *Cluster) aheadRelease(n int64) func() {
	var once sync.Once
	return func() { once.Do(func() { c.releaseAhead(n) }) }
}

// streamPeer readies a peer answer that streams to the client: its length
// hidden (its body MAC is checked only at its end, and a known length lets
// the ingress treat the body as whole, a client's Content-Length or slices
// stored as they stream by, before that check; a peer's answer on the
// cluster listener's read loop carries one, net/http's is chunked), and
// its body resumable from the origin. It returns proxy.Result.Resumed.
func (c *Cluster) streamPeer(ctx context.Context, fr proxy.FetchRequest, resp *http.Response, lossy bool) func() bool {
	if (resp.Request == nil || resp.Request.Method != http.MethodHead) && resp.ContentLength > 0 {
		resp.ContentLength = -1
		resp.Header.Del("Content-Length")
	}
	c.withResume(ctx, fr, resp, lossy)
	return resumedOf(resp)
}
