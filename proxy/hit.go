package proxy

import (
	"net/http"
	"time"

	"github.com/edgecache/edge/coding"
)

// hitQuery is what of a request decides how a stored entry answers it,
// read once by each front: ServeHTTP from the parsed request, AppendHit
// from what the HTTP/1.1 hit path parsed.
type hitQuery struct {
	cc      CacheControl // the request's directives (Pragma folded in)
	hasAuth bool         // the request carries Authorization
	accept  []string     // the Accept-Encoding values
	// partial: the request has a Range or a conditional, answered from the
	// body by serveContent rather than by writing the body whole.
	partial bool
	now     time.Time
}

// queryOf reads r's hitQuery.
func queryOf(r *http.Request, now time.Time) hitQuery {
	return hitQuery{
		cc:      requestDirectives(r),
		hasAuth: len(r.Header["Authorization"]) > 0,
		accept:  r.Header["Accept-Encoding"],
		partial: needsServeContent(r),
		now:     now,
	}
}

// hitDecision is how a stored entry answers a request.
type hitDecision struct {
	use  usability // how the entry answers: useValidate means it does not
	pass reason    // the request must bypass the store ("": it need not)
	// The form the body is sent in: enc, and whether that takes a form
	// other than the entry (encoded or decoded from it).
	enc       coding.Encoding
	transcode bool
}

// answers reports whether the entry answers the request.
func (d hitDecision) answers() bool { return d.pass == "" && d.use != useValidate }

// refresh reports whether the entry is revalidated in the background
// after it answers (stale-while-revalidate).
func (d hitDecision) refresh() bool { return d.use == useSWR }

// status is the answer's Cache-Status.
func (d hitDecision) status() cacheStatus {
	switch d.use {
	case useStale:
		return statusHitStale
	case useSWR:
		return statusHitSWR
	}
	return statusHit
}

// result is the answer's edge_requests_total label.
func (d hitDecision) result() string {
	if d.use == useFresh {
		return ResultHit
	}
	return ResultStale
}

// decideHit is the one decision of whether and how a stored entry e
// answers a request: credentials, freshness and the request's directives,
// the Cache-Status and result, and the coding. Both fronts call it, so
// that a change to what a hit returns is made once; a nil e decides
// nothing (a miss).
func (h *Handler) decideHit(e *Entry, q hitQuery) hitDecision {
	if e == nil {
		return hitDecision{use: useValidate}
	}
	if q.hasAuth && !authAllowsShared(e) {
		return hitDecision{use: useValidate, pass: whyAuthorization}
	}
	d := hitDecision{use: h.usable(e, q.cc, q.now)}
	if d.use != useValidate {
		d.enc, d.transcode = h.codingFor(q.accept, e)
	}
	return d
}

// plainHit reports whether d answers with a fresh hit whose body is
// written as it is stored or in a form already made: what the HTTP/1.1
// hit path writes itself. Everything else (a range, a conditional, a
// stale answer, a sliced or disk-resident entry, a form to make, which is
// charged to the buffer budget) is ServeHTTP's.
func (d hitDecision) plainHit(e *Entry, q hitQuery) bool {
	return d.use == useFresh && d.pass == "" && !q.partial && e.sliceTotal == 0 && !e.fromDisk
}
