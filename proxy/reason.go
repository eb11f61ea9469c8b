package proxy

import "net/http"

// reason says why a response was not stored, or why a request passed the
// cache by. It is the edge_not_stored_total label and the Cache-Status
// detail, and one table (reasonScopes) says what each reason tells the
// cache about the URL, so that what is forgotten, remembered and evicted
// follows from the reason and is written once.
type reason string

// Reasons from RFC 9111's storability (Policy.storable).
const (
	whyMethod         reason = "method"           // not a GET
	whyStatus         reason = "status"           // a status this cache does not understand
	whyRequestNoStore reason = "request-no-store" // the request said no-store
	whyMustUnderstand reason = "must-understand"  // must-understand on a status we do not know
	whyNoStore        reason = "no-store"
	whyPrivate        reason = "private"
	whyNoCacheFields  reason = "no-cache-fields" // no-cache="…" or private="…" naming fields that cannot be kept out of the stored copy, or unreadable
	whyAuthorization  reason = "authorization"   // a request with credentials, a response not marked shareable
	whySetCookie      reason = "set-cookie"
	whyVaryStar       reason = "vary-star"
	whyNoFreshness    reason = "no-freshness"  // never fresh and never validatable
	whyRequestError   reason = "request-error" // an answer to the request's form, or one RFC 6585 forbids storing (aboutTheRequestMessage)
)

// Reasons of this cache's own beyond RFC 9111.
const (
	whyPersonalHeuristic reason = "personal-heuristic" // heuristic freshness for a request with a Cookie or credentials
	whyTooLarge          reason = "too-large"          // larger than cache.max_object_bytes
	whyBufferFull        reason = "buffer-full"        // no room in limits.max_buffered_bytes now
	whyUncacheable       reason = "uncacheable"        // hit-for-pass: the URL was found uncacheable lately
	whySlicedFallback    reason = "sliced-fallback"    // a sliced object's part could not be had: forwarded whole
	whyQRule             reason = "q-rule"             // the cluster's placement keeps it elsewhere
	whyResumed           reason = "resumed"            // its body was pieced together after a failure
	whyPurged            reason = "purged"             // a purge came while it was fetched
	whyBodyError         reason = "body-error"         // the body did not arrive whole
	whyRule              reason = "rule"               // a cache rule of the site bypasses the store (bypass: true)
	whyAmbiguousPath     reason = "ambiguous-path"     // a path origins read in more than one way (//, dot segments, ;): passed, under a site with rules
	whySliceVaries       reason = "slice-varies"       // a slice came with a Vary its unvarying object has not: someone's own
	whyVaryChanged       reason = "vary-changed"       // a 304 named other Vary fields than the stored copy's: valid for its request alone
	whySchemeRedirect    reason = "scheme-redirect"    // a redirect to the same host on the other scheme, with the scheme out of the key
)

// DetailPurged is the Cache-Status detail of a response served but not
// stored because a purge naming it was going round (whyPurged): a cache
// further on does not keep it either (cluster/fetch.go).
const DetailPurged = string(whyPurged)

// scope is what a reason is about.
type scope int

const (
	// aboutURL: the origin's answer for the URL (private, no-store, too
	// large): the stale copy is outdated and the URL is remembered as one
	// to pass by, or as too large.
	aboutURL scope = iota
	// aboutRequest: this request or this moment (its credentials, its
	// no-store, a full buffer): others' copies stay and nothing is
	// remembered.
	aboutRequest
	// aboutStatus: a status this cache does not store; it says nothing
	// about the URL's other answers.
	aboutStatus
	// aboutFill: a body that was fetched but not kept (placement, a
	// purge, a failure): counted, nothing else.
	aboutFill
)

// reasonScopes is the one table of reasons. A reason missing from it is
// about the URL, the safe default: the stale copy goes and the URL is
// passed by for a while.
var reasonScopes = map[reason]scope{
	whyRequestNoStore:    aboutRequest,
	whyAuthorization:     aboutRequest,
	whyPersonalHeuristic: aboutRequest,
	whyBufferFull:        aboutRequest,
	whyStatus:            aboutStatus,
	whyQRule:             aboutFill,
	whyResumed:           aboutFill,
	whyPurged:            aboutFill,
	whyBodyError:         aboutFill,
	whySliceVaries:       aboutFill,
	whyVaryChanged:       aboutFill,    // the stale copy is removed by revalidated itself; the URL is not passed by
	whyRule:              aboutRequest, // never reaches storage decisions: the request passed by
	whyAmbiguousPath:     aboutRequest,
	whySchemeRedirect:    aboutRequest, // about the scheme the request came by: https users keep the page
	whyRequestError:      aboutRequest,
}

func (why reason) scope() scope {
	if s, ok := reasonScopes[why]; ok {
		return s
	}
	return aboutURL
}

// memory is where the cache remembers a URL it did not store.
type memory int

const (
	rememberNothing memory = iota
	rememberPass           // hit-for-pass: forward without coalescing until cache.pass_ttl
	rememberLarge          // too large: forward as is, Range included
)

// remembered says which memory a response not stored for why goes to.
func (why reason) remembered() memory {
	switch {
	case why == whyTooLarge:
		return rememberLarge
	case why.scope() == aboutURL:
		return rememberPass
	}
	return rememberNothing
}

// outdatesStale reports whether a fresh answer not stored for why makes
// the stored copy it was validating outdated for everyone.
func (why reason) outdatesStale() bool { return why.scope() == aboutURL }

// speaksForURL reports whether a response's status answers for the URL
// whoever asks (when the request carried no cookie, no query of its own:
// aboutTheURL), so that it outdates the stale copy: a success, a
// redirection, and the errors that say the resource is not to be had
// (401, 403, 404, 405, 410, 451: a page withdrawn or restricted must not
// stay servable stale, a review found). The other errors may be about the
// request that drew them (400, 413 or 431 for a field the origin takes
// smaller than the edge, 429) or about the moment (5xx): one client
// sending a head the origin refuses must not take the URL's stale copy (a
// review found one 14 KiB Referer removing the copy stale-if-error would
// have served in an outage: the header-oversize attack of "Your Cache Has
// Fallen", CPDoS). A firewall's 403 to a hostile request still takes it:
// keeping a withdrawn page servable would be worse.
func speaksForURL(status int) bool {
	switch status {
	case http.StatusUnauthorized, http.StatusForbidden, http.StatusNotFound, http.StatusMethodNotAllowed, http.StatusGone, http.StatusUnavailableForLegalReasons:
		return true
	}
	return status < 400
}

// passesForURL reports whether a response of status not stored makes the
// URL pass the cache for everyone (hit-for-pass, cache.pass_ttl): what
// speaksForURL says, less 403, 405 and 451, which a firewall answers to
// one hostile request (a review: one request a firewall refused every
// pass_ttl kept a page uncached). 401 stays: an API that answers every
// anonymous request 401 would queue them behind one another without it.
// Passing only forgoes coalescing; the stale copy is speaksForURL's.
func passesForURL(status int) bool {
	switch status {
	case http.StatusForbidden, http.StatusMethodNotAllowed, http.StatusUnavailableForLegalReasons:
		return false
	}
	return speaksForURL(status)
}

// aboutTheURL reports whether a reason not to store what this request
// fetched says something about the URL for everyone, so that the stale
// variant goes. A response to a request that carried a Cookie may be that
// user's own (an origin that answers logged-in users `private` without
// `Vary: Cookie`): it says nothing about what anonymous visitors get, and
// one such request must not evict what they share. The same holds for a
// request whose query held parameters the key rule dropped (ownQuery).
// (Its hit-for-pass memory is kept apart too: see passKey.) Nor does an
// error status that may be about the request (speaksForURL).
func (m miss) aboutTheURL(why reason, status int) bool {
	return why.outdatesStale() && speaksForURL(status) && !m.hasCookie && !m.ownQuery
}
