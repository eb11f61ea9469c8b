package proxy

import (
	"net/http"
	"strconv"
	"strings"
)

// cacheStatus is one Cache-Status field value of this node (RFC 9211),
// the part after the node's name. Every answer's value is built here, so
// its parameters are spelt, ordered and separated in one place.
type cacheStatus struct {
	hit       bool   // answered from the store (hit) or sent on (fwd)
	fwd       string // why it went upstream: uri-miss, vary-miss, stale, request, miss, bypass
	fwdStatus int    // the upstream's status (0: none)
	stored    bool   // the answer was stored
	collapsed bool   // the answer came from another request's fetch
	detail    string
	// upstream holds the members of the caches nearer the origin that
	// answered (a cluster peer's own Cache-Status), which RFC 9211 keeps
	// before this cache's member: each cache on the path adds its own.
	upstream string
}

// The Cache-Status values the cache's answers use.
var (
	statusHit      = cacheStatus{hit: true}
	statusHitStale = cacheStatus{hit: true, detail: "stale"}
	statusHitSWR   = cacheStatus{hit: true, detail: "stale-while-revalidate"}
)

// forwarded is the Cache-Status of an answer that went upstream for fwd.
func forwarded(fwd string) cacheStatus { return cacheStatus{fwd: fwd} }

// refused is the Cache-Status of an answer the cache made up itself
// (an error, a refusal): fwd says what the request would have needed.
func refused(fwd, detail string) cacheStatus {
	return cacheStatus{fwd: fwd, detail: detail}
}

func (s cacheStatus) withStatus(code int) cacheStatus   { s.fwdStatus = code; return s }
func (s cacheStatus) withDetail(d string) cacheStatus   { s.detail = d; return s }
func (s cacheStatus) markStored() cacheStatus           { s.stored = true; return s }
func (s cacheStatus) markCollapsed() cacheStatus        { s.collapsed = true; return s }
func (s cacheStatus) withUpstream(v string) cacheStatus { s.upstream = v; return s }

// plainHit reports whether s is a fresh hit's, whose field is shared.
func (s cacheStatus) plainHit() bool {
	return s.hit && s.detail == "" && !s.stored && !s.collapsed && s.fwdStatus == 0 && s.upstream == ""
}

// String is the value after "<node>; ".
func (s cacheStatus) String() string {
	b := make([]byte, 0, 64)
	if s.hit {
		b = append(b, "hit"...)
	} else {
		b = append(b, "fwd="...)
		b = append(b, s.fwd...)
	}
	if s.fwdStatus != 0 {
		b = append(b, "; fwd-status="...)
		b = strconv.AppendInt(b, int64(s.fwdStatus), 10)
	}
	if s.stored {
		b = append(b, "; stored"...)
	}
	if s.collapsed {
		b = append(b, "; collapsed"...)
	}
	if s.detail != "" {
		b = append(b, "; detail="...)
		b = append(b, s.detail...)
	}
	return string(b)
}

// field is the whole Cache-Status field value of an answer from this node.
func (h *Handler) field(s cacheStatus) []string {
	if s.plainHit() {
		return h.hitStatus
	}
	if s.upstream != "" {
		return []string{s.upstream + ", " + h.statusPrefix + s.String()}
	}
	return []string{h.statusPrefix + s.String()}
}

// staleOnError is the Cache-Status of a stale copy served because the
// origin failed (code: its status, 0 when it did not answer).
func staleOnError(code int) cacheStatus {
	return forwarded("stale").withStatus(code).withDetail("origin-error")
}

// AnsweredFromStore reports whether an answer's last Cache-Status member,
// the answering cache's own (RFC 9211 lists the caches nearest the origin
// first), says it came from that cache's store: "name; hit…". A cluster
// probe's answer is the page only then; anything else the cache made up
// itself (a refusal, its per-client limit's 429) is not.
func AnsweredFromStore(h http.Header) bool {
	params, ok := lastMemberParams(h)
	if !ok {
		return false
	}
	first, _, _ := strings.Cut(params, ";")
	return strings.TrimSpace(first) == "hit"
}

// AnsweredStaleFromStore reports whether an answer came from the answering
// cache's store (AnsweredFromStore) stale: its member's detail is "stale"
// or "stale-while-revalidate". Such a copy is refreshed only by a request
// that may fetch, which a cluster probe may not.
func AnsweredStaleFromStore(h http.Header) bool {
	if !AnsweredFromStore(h) {
		return false
	}
	params, _ := lastMemberParams(h)
	for p := range strings.SplitSeq(params, ";") {
		if d, ok := strings.CutPrefix(strings.TrimSpace(p), "detail="); ok {
			return d == statusHitStale.detail || d == statusHitSWR.detail
		}
	}
	return false
}

// lastMemberParams returns the parameters of h's last Cache-Status member
// (after the cache's name), ok false if it has none.
func lastMemberParams(h http.Header) (string, bool) {
	vals := h.Values("Cache-Status")
	if len(vals) == 0 {
		return "", false
	}
	last := vals[len(vals)-1]
	if i := strings.LastIndexByte(last, ','); i >= 0 {
		last = last[i+1:]
	}
	_, params, ok := strings.Cut(last, ";")
	return params, ok
}
