package node

import (
	"io"
	"net/http"
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
// long answer after it is not cut); a body the handler did not read to
// its end is given up at once when it returns, and net/http then closes
// the connection after the answer. With timeout 0 only the latter: for a
// server whose ReadTimeout bounds the body (the admin listener's), or
// whose handler does (the public listeners: the proxy's body rate limit,
// limits.body_timeout and limits.min_body_rate), which a deadline set
// here would replace.
func withBodyDeadline(next http.Handler, timeout time.Duration) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body == nil || r.Body == http.NoBody || r.ContentLength == 0 {
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
		r.Body = body
		next.ServeHTTP(w, r)
		if !body.ended.Load() {
			_ = rc.SetReadDeadline(time.Now())
		}
	})
}

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
