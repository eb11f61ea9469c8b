package cluster

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"time"

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
// An answer still arriving after resumeAfter is raced against the origin:
// whichever is ready first is served and the other is closed. Answers
// larger than Config.PeerWholeBytes stream as before (with resume) once
// that many bytes have come: holding a large body would delay its first
// byte by its whole transfer and cost memory per request.

// The outcomes of reading peer answers whole, as metric labels and
// status-page keys.
const (
	wholeRead       = iota // read whole in time
	wholeStreamed          // larger than the limit: streamed from there
	wholeFailed            // failed before a byte was sent: the climb went on
	wholeRacePeer          // slow: raced, and the peer's answer was ready first
	wholeRaceOrigin        // slow: raced, and the origin answered first
)

var wholeOutcomes = [...]string{"whole", "streamed", "failed", "race_peer", "race_origin"}

func (c *Cluster) countWhole(outcome int) {
	c.wholes[outcome].Add(1)
	c.metrics.WholeAnswers.WithLabelValues(wholeOutcomes[outcome]).Inc()
}

// WholeAnswers counts the peer answers read whole before their header went
// to the client, by outcome (for the status page).
func (c *Cluster) WholeAnswers() map[string]int64 {
	out := make(map[string]int64, len(wholeOutcomes))
	for i, o := range wholeOutcomes {
		out[o] = c.wholes[i].Load()
	}
	return out
}

// peerAnswer is what reading the start of a peer's answer found.
type peerAnswer struct {
	head []byte // the bytes read
	more bool   // the body goes on past head (larger than the limit)
	err  error  // the body failed (a break, a stall, a bad MAC)
}

// readStart reads body up to limit bytes, and one more to learn whether it
// goes on.
func readStart(body io.Reader, limit int64) peerAnswer {
	var buf bytes.Buffer
	n, err := buf.ReadFrom(io.LimitReader(body, limit+1))
	if err != nil {
		return peerAnswer{err: err}
	}
	return peerAnswer{head: buf.Bytes(), more: n > limit}
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
		c.withResume(ctx, fr, resp)
		fromPeer.Resumed = resumedOf(resp)
		return fromPeer, true
	}
	read := make(chan peerAnswer, 1)
	go func() { read <- readStart(resp.Body, c.cfg.PeerWholeBytes) }()
	deadline := time.NewTimer(c.resumeAfter())
	defer deadline.Stop()

	var a peerAnswer
	select {
	case a = <-read:
		if a.err != nil {
			resp.Body.Close()
			c.countWhole(wholeFailed)
			return proxy.Result{}, false
		}
		if a.more {
			c.countWhole(wholeStreamed)
		} else {
			c.countWhole(wholeRead)
		}
		return c.peerResult(ctx, fr, resp, a, fromPeer), true
	case <-deadline.C:
	case <-ctx.Done():
		resp.Body.Close()
		<-read
		return proxy.Result{}, false
	}

	// Slow: ask the origin too, and serve whichever is ready first.
	octx, ocancel := context.WithCancel(ctx)
	type originAnswer struct {
		res proxy.Result
		err error
	}
	asked := make(chan originAnswer, 1)
	go func() {
		res, err := c.origin.Fetch(octx, fr)
		asked <- originAnswer{res, err}
	}()
	peerDone := false
	for {
		select {
		case a = <-read:
			peerDone = true
			if a.err == nil {
				ocancel()
				go func() {
					if o := <-asked; o.err == nil {
						o.res.Resp.Body.Close()
					}
				}()
				c.countWhole(wholeRacePeer)
				return c.peerResult(ctx, fr, resp, a, fromPeer), true
			}
			resp.Body.Close()
		case o := <-asked:
			if o.err != nil {
				ocancel()
				if peerDone {
					c.countWhole(wholeFailed)
					return proxy.Result{}, false
				}
				asked = nil // wait for the peer alone
				continue
			}
			resp.Body.Close() // ends the read at once
			if !peerDone {
				<-read
			}
			c.countWhole(wholeRaceOrigin)
			o.res.Resp.Body = &cancelOnClose{ReadCloser: o.res.Resp.Body, cancel: ocancel}
			o.res.Keep = false // the caller decides, as for the climb's origin fetch
			o.res.Retries = 1  // the peer, for the access log
			return o.res, true
		}
		if peerDone && asked == nil {
			ocancel() // already, when the origin failed; vet cannot tell
			c.countWhole(wholeFailed)
			return proxy.Result{}, false
		}
	}
}

// peerResult is the result for a peer answer whose start a holds: the
// whole body from memory, or the start followed by the rest of the stream.
func (c *Cluster) peerResult(ctx context.Context, fr proxy.FetchRequest, resp *http.Response, a peerAnswer, res proxy.Result) proxy.Result {
	if !a.more {
		// Read to its end, the MAC checked: the peer's stream is done.
		resp.Body.Close()
		resp.Body = io.NopCloser(bytes.NewReader(a.head))
		return res
	}
	resp.Body = &prefixedBody{Reader: io.MultiReader(bytes.NewReader(a.head), resp.Body), body: resp.Body}
	c.withResume(ctx, fr, resp)
	res.Resumed = resumedOf(resp)
	return res
}

// prefixedBody is a body whose first bytes were read ahead.
type prefixedBody struct {
	io.Reader
	body io.Closer
}

func (b *prefixedBody) Close() error { return b.body.Close() }
