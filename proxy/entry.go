package proxy

import (
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/edgecache/edge/coding"
	"github.com/edgecache/edge/rules"
)

// Entry is one stored response (one variant of one URL). An Entry is
// immutable once stored, except for the soft-purge flag: a header update
// after revalidation stores a new Entry that shares the body.
type Entry struct {
	Key          string      // URL cache key
	VaryKey      string      // normalised selecting request header values ("" without Vary)
	VaryNames    []string    // lower-case, sorted header names from Vary
	Status       int         // response status code
	Header       http.Header // stored header fields, hop-by-hop fields removed
	Body         []byte      // the complete body
	RequestTime  time.Time   // when the request that produced this response was sent
	ResponseTime time.Time   // when its response was received

	cc         CacheControl  // effective directives (targeted field if present, else Cache-Control)
	lifetime   time.Duration // freshness lifetime (RFC 9111 §4.2.1)
	initialAge time.Duration // corrected_initial_age (RFC 9111 §4.2.3)
	heuristic  bool          // lifetime came from the heuristic
	etag       string
	lastMod    time.Time
	hasLastMod bool
	surrogates []string        // Surrogate-Key / Cache-Tag values, for purge
	life       *rules.Lifetime // nil, or what the site's rules say of its lifetime (finishEntry)
	size       int64           // bytes of this representation (header, key, body)

	// Content codings (compress.go): the body's coding, the codings e may
	// be served in (0: only as stored), and the derived forms made so far.
	coding    coding.Encoding
	offers    coding.Set
	forms     atomic.Pointer[formSet]
	formBytes atomic.Int64 // bytes of the derived forms attached to e
	transient bool         // a form made for one response, not kept (compress.go)
	pinBytes  atomic.Int64 // bytes charged to the buffer budget while e is pinned

	// Guarded by the store's lock: whether e is stored, and the bytes it
	// is charged (its size plus its derived forms).
	inStore bool
	charged int64

	sliceTotal int64 // > 0: a manifest of a sliced object this large (slice.go)
	sliceBytes int64 // the manifest's slice size

	stale    atomic.Bool
	fromDisk bool                     // read from the disk tier for one response, not in RAM
	via      atomic.Pointer[[]string] // Via of responses served from this entry, built on first use
	hit1     atomic.Pointer[hitBlock] // response head for the HTTP/1.1 hit path (hit1.go), built on first use

	// Bytes of an entry evicted from the store while responses are still
	// being written from it are charged to the buffer budget until the
	// last writer is done (see Handler.pinDropped).
	users   atomic.Int32
	dropped atomic.Bool
	pinned  atomic.Bool
}

// entryOverhead approximates the bookkeeping bytes of an entry beyond its
// header and body bytes, so that many tiny objects still count.
const entryOverhead = 256

// tagOverhead approximates what each surrogate tag of an entry costs
// beyond its bytes in the header: its string in the entry's list and its
// slot in the store's tag index. Uncharged, 2,000 tags a page (one
// origin's Surrogate-Key) held ten times the store's budget in the heap
// (a review's TestS71SurrogateTagsAreChargedForWhatTheyCost).
const tagOverhead = 64

// computeSize charges the entry's header, key and body bytes, and its
// tags' bookkeeping.
func (e *Entry) computeSize() {
	n := int64(len(e.Body)+len(e.Key)+len(e.VaryKey)+entryOverhead) + int64(len(e.surrogates))*tagOverhead
	for k, vs := range e.Header {
		n += int64(len(k))
		for _, v := range vs {
			n += int64(len(v)) + 4
		}
	}
	e.size = n
}

// Size is the number of bytes the entry is charged against the budget.
func (e *Entry) Size() int64 { return e.size }

// MarkStale makes the entry stale from now on (soft purge). It will be
// revalidated on its next use.
func (e *Entry) MarkStale() { e.stale.Store(true) }

// hopByHop are the fields RFC 9110 §7.6.1 says a proxy must not forward and
// a cache must not store.
var hopByHop = []string{
	"Connection", "Keep-Alive", "Proxy-Connection", "Proxy-Authenticate",
	"Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade",
}

// removeHopByHop deletes hop-by-hop fields and those named by Connection.
func removeHopByHop(h http.Header) {
	for _, v := range h.Values("Connection") {
		for _, name := range strings.Split(v, ",") {
			if name = strings.TrimSpace(name); name != "" {
				h.Del(name)
			}
		}
	}
	for _, name := range hopByHop {
		h.Del(name)
	}
}

// removeEdgeHeaders deletes every Edge-* field from a client request: they
// carry peer-protocol state, and a client must not be able to inject it.
func removeEdgeHeaders(h http.Header) {
	for k := range h {
		if len(k) >= 5 && strings.EqualFold(k[:5], "edge-") {
			delete(h, k)
		}
	}
}

// withBody returns a copy of e (an entry published before its body was in)
// holding body, with a Content-Length that matches it.
func (e *Entry) withBody(body []byte) *Entry {
	hdr := e.Header
	if cl := hdr["Content-Length"]; len(cl) != 1 || cl[0] != strconv.Itoa(len(body)) {
		hdr = hdr.Clone()
		hdr["Content-Length"] = []string{strconv.Itoa(len(body))}
	}
	out := e.sibling(hdr, body)
	out.etag, out.coding, out.offers = e.etag, e.coding, e.offers
	out.computeSize()
	return out
}

// sibling returns a new entry for the same response as e (key, variant,
// status, times, freshness, validators' dates, tags) with hdr and body;
// the caller sets its etag and coding and computes its size.
func (e *Entry) sibling(hdr http.Header, body []byte) *Entry {
	return &Entry{
		Key: e.Key, VaryKey: e.VaryKey, VaryNames: e.VaryNames, Status: e.Status, Header: hdr, Body: body,
		RequestTime: e.RequestTime, ResponseTime: e.ResponseTime,
		cc: e.cc, lifetime: e.lifetime, initialAge: e.initialAge, heuristic: e.heuristic, life: e.life,
		lastMod: e.lastMod, hasLastMod: e.hasLastMod, surrogates: e.surrogates,
	}
}
