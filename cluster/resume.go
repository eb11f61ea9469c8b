package cluster

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/edgecache/edge/proxy"
)

// A peer's answer can break mid-body after its header has gone to the
// client: the peer is suspected (its streams end), it dies, or a lossy link
// stalls TCP past the peer body's idle limit. The client then has part of
// a response it cannot use.
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

// resumeBody reads a peer's answer and, when it breaks, the rest from the
// origin.
type resumeBody struct {
	c       *Cluster
	ctx     context.Context // the request's: when it ends, nothing is resumed
	key     string
	req     *http.Request // the request as the fetcher got it
	body    io.ReadCloser
	etag    string
	coding  string
	total   int64 // the peer's Content-Length; -1 unknown
	got     int64
	resumed bool
}

// withResume wraps a peer's answer to req so that a break mid-body is
// resumed from the origin.
func (c *Cluster) withResume(ctx context.Context, key string, req *http.Request, resp *http.Response) {
	if !resumable(resp) {
		return
	}
	resp.Body = &resumeBody{c: c, ctx: ctx, key: key, req: req, body: resp.Body, etag: resp.Header.Get("Etag"),
		coding: resp.Header.Get("Content-Encoding"), total: resp.ContentLength}
}

// Resumed reports whether part of the body came from the origin; the proxy
// does not store such a body.
func (b *resumeBody) Resumed() bool { return b.resumed }

func (b *resumeBody) Read(p []byte) (int, error) {
	n, err := b.body.Read(p)
	b.got += int64(n)
	if err == nil || errors.Is(err, io.EOF) || b.resumed || errors.Is(err, errBadPeerResponse) || b.ctx.Err() != nil {
		// A tampered body, a client that left, or a second break: as
		// before, the body fails.
		return n, err
	}
	if rerr := b.resume(); rerr != nil {
		b.c.metrics.Resumes.WithLabelValues("failed").Inc()
		b.c.log.Debug("resuming a peer body from the origin", "key", b.key, "at", b.got, "peer_err", err, "err", rerr)
		return n, err
	}
	b.c.metrics.Resumes.WithLabelValues("ok").Inc()
	if n > 0 {
		return n, nil
	}
	return b.Read(p)
}

// errNotResumed is an origin answer that is not the rest of the same bytes.
var errNotResumed = errors.New("cluster: the origin did not send the rest of the same representation")

// resume asks the origin for the bytes after those received.
func (b *resumeBody) resume() error {
	out := b.req.Clone(b.ctx)
	out.Header = b.req.Header.Clone()
	for _, h := range []string{"If-None-Match", "If-Modified-Since", "If-Match", "If-Unmodified-Since", "Range", "If-Range"} {
		out.Header.Del(h)
	}
	out.Header.Set("Range", "bytes="+strconv.FormatInt(b.got, 10)+"-")
	out.Header.Set("If-Range", b.etag)
	res, err := b.c.origin.Fetch(b.ctx, b.key, out)
	if err != nil {
		return err
	}
	resp := res.Resp
	start, end, total, ok := proxy.ParseContentRange(resp.Header.Get("Content-Range"))
	if resp.StatusCode != http.StatusPartialContent || !ok || start != b.got ||
		(b.total >= 0 && (total != b.total || end != b.total-1)) ||
		resp.Header.Get("Etag") != b.etag || resp.Header.Get("Content-Encoding") != b.coding {
		resp.Body.Close()
		return errNotResumed
	}
	_ = b.body.Close()
	b.body, b.resumed = resp.Body, true
	return nil
}

func (b *resumeBody) Close() error { return b.body.Close() }
