package node

import (
	"errors"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"time"
)

// peerBodyTimeout is how long a request on the cluster listener may take
// to send its body (withBodyDeadline). Its bodies are small (a purge's
// list of what it stands for, a pull of what is owed) and come from
// peers: 30 s is far above what they need on any network the cluster
// runs over.
const peerBodyTimeout = 30 * time.Second

// peerWriteTimeout is how long a write on the cluster listener may block
// (withWriteDeadline). Its http.Server can have no WriteTimeout (a peer's
// stream of a large body may rightly take minutes), and before this
// nothing bounded a write there: an unauthenticated client that
// pipelined requests (each refused with a small 403) and read nothing
// blocked net/http's write for good, holding the connection and a slot
// of its address's share (a review). A peer reads as fast as the slowest
// reader of the fill it feeds, which each of its own writes may hold up
// to limits.write_timeout: twice that, and never under 10 s.
func peerWriteTimeout(clientWrite time.Duration) time.Duration {
	return max(2*clientWrite, 10*time.Second)
}

// withWriteDeadline gives a request's answer timeout for its writes: from
// the request's start (an answer written while the handler runs: an
// indicator, a refusal that fills the buffer), and again when the handler
// returns (what net/http then flushes: most answers, after however long
// the handler waited, a purge's for one). A long answer renews it per
// chunk itself (the proxy's writes).
func withWriteDeadline(next http.Handler, timeout time.Duration) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rc := http.NewResponseController(w)
		_ = rc.SetWriteDeadline(time.Now().Add(timeout))
		next.ServeHTTP(w, r)
		_ = rc.SetWriteDeadline(time.Now().Add(timeout))
	})
}

// withBodyDeadline bounds the time a request's body may take, for
// listeners whose http.Server cannot have a ReadTimeout (the cluster
// listener: a ReadTimeout would also end a peer's long stream, as
// net/http's background read cancels the request when it passes), and
// ends a body its handler left unread. Before it, a head declaring a body
// that never came held its connection for good wherever a handler
// answered without reading the body (a refused peer request: unsigned, an
// unknown path; on the public listeners a host no site serves, a rate
// limit, the redirect to HTTPS): net/http reads up to 256 KiB of it
// before the answer, with no deadline (reproduced on the cluster listener
// and on the public one, where such connections count against
// limits.max_connections and idle_timeout never applies to them). The
// body gets timeout to arrive, the deadline lifted once it has (so that a
// long answer after it is not cut); what is left of a body the handler
// did not read to its end is read within a moment when it returns, or
// given up, and net/http then closes the connection after the answer
// (endUnreadBody). With timeout 0 only the latter: for a
// server whose ReadTimeout bounds the body (the admin listener's), or
// whose handler does (the public listeners: the proxy's body rate limit,
// limits.body_timeout and limits.min_body_rate), which a deadline set
// here would replace.
func withBodyDeadline(next http.Handler, timeout time.Duration) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body == nil || r.Body == http.NoBody || r.ContentLength == 0 || (timeout == 0 && r.ProtoMajor != 1) {
			// No body; or HTTP/2 and HTTP/3, where a body left unread
			// ends its stream, not the connection, and nothing reads it.
			next.ServeHTTP(w, r)
			return
		}
		rc := http.NewResponseController(w)
		if timeout > 0 {
			if err := rc.SetReadDeadline(time.Now().Add(timeout)); err != nil {
				next.ServeHTTP(w, r) // a writer without deadlines: nothing to bound here
				return
			}
		}
		body := &deadlineBody{ReadCloser: r.Body, rc: rc, lift: timeout > 0}
		// A copy for the handler: net/http keeps its own request, and
		// after the handler reads its body's type to decide what to do
		// with what is left (discard it, or close the connection after
		// an early Close or an Expect: 100-continue it never answered),
		// which a body of another type here hid from it (a review: the
		// next request parsed from a closed body's rest).
		inner := *r
		inner.Body = body
		next.ServeHTTP(w, &inner)
		if !body.ended.Load() {
			endUnreadBody(rc, r)
		}
	})
}

// unreadBodyGrace is how long endUnreadBody waits for what is left of a
// body its handler did not read: what has arrived is read, the rest not
// waited for.
const unreadBodyGrace = 250 * time.Millisecond

// endUnreadBody does with a body its handler left what net/http would
// (read up to 256 KiB of it, so that the connection can serve the next
// request), but within unreadBodyGrace instead of for ever: a body not
// in by then, or larger, leaves a past read deadline, and net/http's own
// attempt then fails at once and closes the connection after the answer.
// A body net/http already read (it does so, and closes it, before an
// answer larger than its buffer goes out) or the handler closed is left
// to net/http, and the deadline is lifted: a past one would end
// net/http's background read of the connection, which cancels the
// connection's context (a review: every later request on it cancelled).
// A body behind Expect: 100-continue is not read (that would ask the
// client for it): net/http closes such a connection after the answer, but
// first its Close of the body reads what is left, with no deadline, from a
// client that waits for a 100 Continue that never comes (held for good:
// TestS19TLSH1StalledBodyAndStalledReader), so it gets a past deadline.
func endUnreadBody(rc *http.ResponseController, r *http.Request) {
	if strings.EqualFold(r.Header.Get("Expect"), "100-continue") {
		_ = rc.SetReadDeadline(time.Now())
		return
	}
	if rc.SetReadDeadline(time.Now().Add(unreadBodyGrace)) != nil {
		return // no deadline to read it within: left to the server, as before
	}
	_, err := io.CopyN(io.Discard, r.Body, maxUnreadBodyBytes+1)
	if err == io.EOF || errors.Is(err, http.ErrBodyReadAfterClose) {
		// At its end, or closed (by net/http once it read it to the end,
		// or by the handler, which net/http then deals with itself).
		_ = rc.SetReadDeadline(time.Time{})
		return
	}
	_ = rc.SetReadDeadline(time.Now())
}

// maxUnreadBodyBytes is what net/http reads of a body its handler left
// (its maxPostHandlerReadBytes), and endUnreadBody with it.
const maxUnreadBodyBytes = 256 << 10

// deadlineBody lifts the read deadline withBodyDeadline set once the body
// has ended.
type deadlineBody struct {
	io.ReadCloser
	rc    *http.ResponseController
	lift  bool // a deadline was set: lift it at the end
	ended atomic.Bool
}

func (b *deadlineBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF && !b.ended.Swap(true) && b.lift {
		_ = b.rc.SetReadDeadline(time.Time{})
	}
	return n, err
}
