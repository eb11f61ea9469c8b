package cluster

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/edgecache/edge/proxy"
)

// A peer's answer can break mid-body after its header has gone to the
// client: the peer is suspected (its streams end), it dies, or a lossy link
// stalls TCP for seconds. The client then has part of a response it cannot
// use, or waits.
// When the answer names its bytes by a strong entity tag, the rest is
// asked of the origin with Range and If-Range (RFC 9110 §14.2, §13.1.5):
// the origin sends exactly the missing bytes of the same representation,
// or the body fails as before. A resumed body is never stored: its first
// part came from a peer whose body MAC, sent at the end, never arrived.

// resumable reports whether a peer's answer can be resumed from the origin:
// a whole 200 with a strong validator and a known coding.
func resumable(resp *http.Response) bool {
	etag := resp.Header.Get("Etag")
	return resp.StatusCode == http.StatusOK && strings.HasPrefix(etag, `"`) && len(resp.Header["Content-Range"]) == 0
}

// resumeAfter is how long a resumable peer answer may go silent before
// the rest is also asked of the origin: 4 × cluster.peer_timeout, at least
// a second. TCP's retransmission timeouts double from 200 ms, so this is
// three or four losses in a row. The stalled stream keeps its chance: the
// origin's answer takes over only if the stream is still silent when it
// comes, and the stream is cut only then.
//
// A stream that came back during a race may stall again (a loss burst
// outlasts one retransmission); each new stall races again, up to
// maxStallRaces per answer, so that a flapping link costs the origin a
// few range requests, not one per stall.
func (c *Cluster) resumeAfter() time.Duration {
	return max(4*c.cfg.PeerTimeout, time.Second)
}

// maxStallRaces bounds the origin range requests one stalling answer makes.
const maxStallRaces = 3

// A stream on a link whose heartbeats show loss (lossyLinkShare) can crawl
// without ever going silent for resumeAfter: TCP's retransmission timeouts
// chain (0.2, 0.4, 0.8 s …) between short runs of segments, and a 200 KB
// answer took more than the client's 10 s at 20 % loss in the fault lab.
// Such a stream, once its reads have waited resumeAfter in all for the
// peer's bytes, is raced against the origin once (as whole.go races a small
// answer that crawls), and the origin's rest takes over whenever it comes
// first, the stream's later bytes skipped; a stream that ends before the
// origin's answer keeps its bytes. Only the time spent waiting inside the
// peer body's Read counts: a client that reads slowly (the fill paces
// itself to its reader) is not the peer crawling. On a clean link a slow
// stream is left alone: it is most likely the home relaying a slow origin.

// resumeBody reads a peer's answer and, when it breaks or stalls, the rest
// from the origin.
type resumeBody struct {
	c      *Cluster
	ctx    context.Context // the request's: when it ends, nothing is resumed
	fr     proxy.FetchRequest
	key    string
	req    *http.Request // the request as the fetcher got it
	etag   string
	coding string
	total  int64 // the peer's Content-Length; -1 unknown
	stall  *time.Timer
	lossy  bool // the peer's link shows heartbeat loss: a crawl is raced

	mu      sync.Mutex
	body    io.ReadCloser // the source being read
	got     int64         // bytes read so far
	resumed bool          // body is the origin's
	races   int           // stalls that asked the origin (at most maxStallRaces per answer)
	closed  bool
	ended   bool          // the peer's stream reached its end: nothing to race
	waited  time.Duration // time spent inside the peer body's Read
	crawled bool          // a crawl race was started
	size    int64         // the representation's length, from the origin's Content-Range once resumed
	next    io.ReadCloser // the origin's answer from nextAt, won a stall race: it takes over
	nextAt  int64
}

// withResume wraps a peer's answer to req so that a break mid-body is
// resumed from the origin, and a stall (or, when lossy, a crawl) is raced
// against it.
//
// Only the node the client asked resumes. A node in the middle of a climb
// relays the answer under its own body MAC, which would vouch for the
// peer's unauthenticated part: there the break goes downstream, and the
// node below resumes (and does not store).
func (c *Cluster) withResume(ctx context.Context, fr proxy.FetchRequest, resp *http.Response, lossy bool) {
	if !resumable(resp) || fr.Route != nil {
		return
	}
	b := &resumeBody{c: c, ctx: ctx, fr: fr, key: fr.Key, req: fr.Req, body: resp.Body, etag: resp.Header.Get("Etag"),
		coding: resp.Header.Get("Content-Encoding"), total: resp.ContentLength, lossy: lossy}
	b.stall = time.AfterFunc(time.Hour, func() { b.race(false) })
	b.stall.Stop()
	resp.Body = b
}

// resumedOf is proxy.Result.Resumed for a response whose body withResume
// wrapped (nil for any other: an origin's answer is never spliced).
func resumedOf(resp *http.Response) func() bool {
	if b, ok := resp.Body.(interface{ Resumed() bool }); ok {
		return b.Resumed
	}
	return nil
}

// Resumed reports whether part of the body came from the origin; the proxy
// does not store such a body.
func (b *resumeBody) Resumed() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.resumed || b.next != nil
}

func (b *resumeBody) Read(p []byte) (int, error) {
	for {
		b.mu.Lock()
		if err := b.takeNextLocked(); err != nil {
			b.mu.Unlock()
			return 0, err
		}
		body, resumed := b.body, b.resumed
		b.mu.Unlock()
		if !resumed {
			b.stall.Reset(b.c.resumeAfter())
		}
		readAt := time.Now()
		n, err := body.Read(p)
		b.stall.Stop()
		b.mu.Lock()
		b.got += int64(n)
		switched := b.next != nil
		if errors.Is(err, io.EOF) && !resumed {
			b.ended = true // the whole stream came: a race now finds nothing to take over
			if switched {
				// A race took over while this last read was returning
				// the stream's verified end: the stream wins after all.
				_ = b.next.Close()
				b.next, b.size, switched = nil, 0, false
			}
		}
		crawl := false
		if !resumed && b.lossy && !b.ended && !b.crawled {
			b.waited += time.Since(readAt)
			crawl = b.waited >= b.c.resumeAfter()
			b.crawled = crawl
		}
		b.mu.Unlock()
		if crawl {
			go b.race(true)
		}
		if switched {
			// The origin won a stall race and cut this stream: its
			// error is not the client's; the rest comes from the origin.
			if n > 0 {
				return n, nil
			}
			continue
		}
		if resumed && errors.Is(err, io.EOF) && b.gotNow() != b.size {
			return n, io.ErrUnexpectedEOF // the origin's rest ended short of its own length
		}
		if err == nil || errors.Is(err, io.EOF) || resumed || errors.Is(err, errBadPeerResponse) || b.ctx.Err() != nil {
			// A tampered body, a client that left, or a second break: as
			// before, the body fails.
			return n, err
		}
		rest, size, rerr := b.fetchRest(b.gotNow())
		if rerr != nil {
			b.c.countResume(resumeFailed)
			b.c.log.Debug("resuming a peer body from the origin", "key", b.key, "at", b.gotNow(), "peer_err", err, "err", rerr)
			return n, err
		}
		b.mu.Lock()
		if b.next != nil {
			// A stall race's answer came first (the stream broke while
			// it was asked): it takes over, this one is not needed.
			b.mu.Unlock()
			_ = rest.Close()
			if n > 0 {
				return n, nil
			}
			continue
		}
		_ = b.body.Close()
		b.body, b.resumed, b.size = rest, true, size
		b.mu.Unlock()
		b.c.countResume(resumeOK)
		if n > 0 {
			return n, nil
		}
	}
}

func (b *resumeBody) gotNow() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.got
}

// takeNextLocked switches to the origin's answer that won a stall race,
// skipping the bytes the stream still delivered after the race began.
func (b *resumeBody) takeNextLocked() error {
	if b.next == nil {
		return nil
	}
	if skip := b.got - b.nextAt; skip > 0 {
		if b.got > b.size {
			// The stream gave more bytes than the whole representation:
			// not the same bytes as the origin's.
			return io.ErrUnexpectedEOF
		}
		if _, err := io.CopyN(io.Discard, b.next, skip); err != nil {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return err
		}
	}
	b.body, b.next, b.resumed = b.next, nil, true
	return nil
}

// race runs when the stream has been silent for resumeAfter (a stall), or
// its reads on a lossy link have waited resumeAfter in all for its bytes (a
// crawl): it asks the origin for the rest. A stall's answer takes over if
// the stream is still silent when it comes; a crawl's, if the stream has
// not ended (the bytes the stream delivered meanwhile are skipped). The
// stream is then cut.
func (b *resumeBody) race(crawl bool) {
	b.mu.Lock()
	if b.resumed || b.next != nil || b.ended || b.races >= maxStallRaces || b.closed || b.ctx.Err() != nil {
		b.mu.Unlock()
		return
	}
	b.races++
	at := b.got
	b.mu.Unlock()
	rest, size, err := b.fetchRest(at)
	b.mu.Lock()
	if err != nil || b.resumed || b.next != nil || b.closed || b.ended || (!crawl && b.got != at) {
		b.mu.Unlock()
		if err == nil {
			_ = rest.Close()
			b.c.countResume(resumeRecovered)
		} else {
			b.c.countResume(resumeFailed)
		}
		return
	}
	b.next, b.nextAt, b.size = rest, at, size
	slow := b.body
	b.mu.Unlock()
	if crawl {
		b.c.countResume(resumeCrawlRaced)
	} else {
		b.c.countResume(resumeRaced)
	}
	_ = slow.Close() // a blocked read returns, and finds next
}

// errNotResumed is an origin answer that is not the rest of the same bytes.
var errNotResumed = errors.New("cluster: the origin did not send the rest of the same representation")

// fetchRest asks the origin for the bytes from at on, and returns them if
// the origin sends exactly those bytes of the same representation.
func (b *resumeBody) fetchRest(at int64) (io.ReadCloser, int64, error) {
	out := b.req.Clone(b.ctx)
	out.Header = b.req.Header.Clone()
	for _, h := range []string{"If-None-Match", "If-Modified-Since", "If-Match", "If-Unmodified-Since", "Range", "If-Range"} {
		out.Header.Del(h)
	}
	out.Header.Set("Range", "bytes="+strconv.FormatInt(at, 10)+"-")
	out.Header.Set("If-Range", b.etag)
	fr := b.fr
	fr.Req = out
	res, err := b.c.origin.Fetch(b.ctx, fr)
	if err != nil {
		return nil, 0, err
	}
	resp := res.Resp
	// All the rest, to the representation's end: a peer's answer has no
	// length (its body MAC rides in a chunked trailer), so the origin's
	// total is the length, and the body is checked against it at its end.
	start, end, total, ok := proxy.ParseContentRange(resp.Header.Get("Content-Range"))
	if resp.StatusCode != http.StatusPartialContent || !ok || start != at || end != total-1 ||
		(b.total >= 0 && total != b.total) ||
		resp.Header.Get("Etag") != b.etag || resp.Header.Get("Content-Encoding") != b.coding {
		resp.Body.Close()
		return nil, 0, errNotResumed
	}
	return resp.Body, total, nil
}

func (b *resumeBody) Close() error {
	b.stall.Stop()
	b.mu.Lock()
	defer b.mu.Unlock()
	b.closed = true
	if b.next != nil {
		_ = b.next.Close()
		b.next = nil
	}
	return b.body.Close()
}

// The outcomes of resumes, as metric labels and status-page keys.
const (
	resumeOK         = iota // resumed after a break
	resumeRaced             // the origin took over a stall
	resumeRecovered         // the stalled (or crawling) stream came back, or ended, first
	resumeFailed            // the body failed as before
	resumeCrawlRaced        // the origin took over a stream crawling on a lossy link
)

var resumeOutcomes = [...]string{"ok", "raced", "stall_recovered", "failed", "crawl_raced"}

func (c *Cluster) countResume(outcome int) {
	c.resumes[outcome].Add(1)
	c.metrics.Resumes.WithLabelValues(resumeOutcomes[outcome]).Inc()
}

// Resumes counts the peer answers resumed from the origin, by outcome
// (for the status page).
func (c *Cluster) Resumes() map[string]int64 {
	return outcomeCounts(resumeOutcomes[:], c.resumes[:])
}

// outcomeCounts maps each outcome's name to its count (status pages).
func outcomeCounts(names []string, counts []atomic.Int64) map[string]int64 {
	out := make(map[string]int64, len(names))
	for i, o := range names {
		out[o] = counts[i].Load()
	}
	return out
}
