package proxy

import (
	"context"
	"errors"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/edgecache/edge/internal/clientaddr"
	"github.com/edgecache/edge/rules"
)

// miss is what serveCacheable knows about a request it cannot answer from
// the store.
type miss struct {
	key string
	// passKey names the requests this one stands for in the hit-for-pass
	// and too-large memories: the URL key, plus the request's keyed fields
	// (fieldKey), plus a mark when it carried a Cookie, so that a request
	// with fields of its own, or a logged-in user's private answer, cannot
	// make everyone else bypass the cache.
	passKey string
	keyed   bool // the request carries keyed fields: never sliced, never probed
	// hasCookie: the request carried a Cookie, so a response that may not
	// be stored may be its user's own (aboutTheURL).
	hasCookie bool
	// ownQuery: the key rule dropped parameters of the request's query,
	// so such a response may be about them (aboutTheURL); urlPassKey is
	// then the pass key of the URL it shares (remembered).
	ownQuery   bool
	urlPassKey string
	vary       []string // the URL's current Vary names (nil: none known)
	stale      *Entry   // the stored variant to validate, if any
	reqCC      CacheControl
	hasAuth    bool
	fwd        string // Cache-Status fwd parameter
	// background: no client reads the body (a stale-while-revalidate
	// refresh), so a body that cannot be kept is abandoned.
	background bool
	// slot: the upstream slot the fetch holds (none: zero), which the
	// body pump gives back.
	slot   upstreamSlot
	ruling *ruling  // the request's cache rules (nil: none)
	wait   fillWait // where a fill this miss leads stands in the wait order
	// purgesAt is the handler's purge count before the lookup that found
	// stale (or nothing). A fill this miss leads starts from it, not from
	// the count when the fill begins: a purge between the two would
	// otherwise let a 304 put the purged body back in the store, and hand
	// it to requests made after the purge (they join only fills begun
	// after it, co.join).
	purgesAt uint64
}

// fetchAndServe answers a miss: it joins the fill of the same variant if
// one is under way, or leads one. A waiter is given the leader's response
// only if the cache could have served it to the waiter from the store:
// shareable, fresh for this request, and selected by this request's Vary
// fields. Otherwise the waiter fetches for itself.
func (h *Handler) fetchAndServe(w http.ResponseWriter, r *http.Request, m miss) string {
	m.wait = h.waitOf(r, m.key)
	if !m.hasAuth { // a request with credentials never shares a fetch
		vary := m.vary
		askedAgain := false
		for pass := 0; pass < 2; pass++ { // the second pass joins the fill of our own variant
			ckey := coalesceKey(m.key, h.varyKey(vary, r))
			f, leader := h.co.join(ckey, m.purgesAt, m.wait)
			if leader {
				return h.lead(w, r, f, ckey, m)
			}
			if !f.joinableBy(m.wait) {
				// A peer's climb, and the fill may be waiting on that
				// peer: fetch apart rather than close a cycle.
				h.metrics.FillsKeptApart.Inc()
				break
			}
			if err := f.wait(r.Context(), h.cfg.CoalesceTimeout); err != nil {
				if !errors.Is(err, errCoalesceTimeout) {
					return ResultError // the client has gone
				}
				if now := h.now(); m.stale != nil && h.staleOnErrorOK(m.stale, m.reqCC, now) {
					// The leader's revalidation is slow: this request
					// serves the stale copy it may serve on an error, as
					// the leader does when the origin fails (a review's
					// TestS63CoalescedWaiterGets504WhereItsStaleCopyMayBeServed).
					h.writeEntry(w, r, m.stale, now, staleOnError(0), nil)
					return ResultStaleError
				}
				h.writeError(w, http.StatusGatewayTimeout, refused(m.fwd, "coalesce-timeout"), "timed out waiting for the origin")
				return ResultError
			}
			if errors.Is(f.err, errOverload) && !askedAgain && (m.stale == nil || !h.staleOnErrorOK(m.stale, m.reqCC, h.now())) {
				// The leader was refused a slot before it fetched: its
				// client's bound, or none free at that moment. This
				// request was not refused; it asks again once (and leads,
				// or joins whoever leads now), rather than answer 503 for
				// another client's limit. The ask is a pass of its own:
				// the one for our variant may still be needed (a review's
				// TestS39RefusedVariantFillAfterAVaryPassIsNotCollapsed:
				// without it each such reader fetched alone). A request
				// with a stale copy it may serve on an error serves it, as
				// before (a third review's TestS40JoinerWithStaleOfARefused-
				// LeaderStillServesStale: asking again, it led, was refused
				// in turn, and lead's refusal serves no stale copy).
				askedAgain = true
				pass--
				continue
			}
			if f.err != nil {
				return h.answerFetchError(w, r, m, f.err)
			}
			if !f.shared {
				break
			}
			e := f.entry
			if h.varyKey(e.VaryNames, r) != e.VaryKey {
				vary = e.VaryNames
				continue
			}
			// A fetch just made for another request is what a client's
			// no-cache asks for, where the rules coalesce such requests.
			if h.usable(e, h.clientDirectives(m.reqCC, m.ruling, e, h.now()), h.now()) != useFresh {
				break
			}
			h.metrics.Coalesced.Inc()
			h.serveFill(w, r, f, nil, forwarded(m.fwd).markCollapsed().withUpstream(f.upstream), nil)
			return ResultCollapsed
		}
	}
	return h.lead(w, r, nil, "", m)
}

// originFailure reports whether an upstream's status is the error a
// stale copy may stand in for: 500, 502, 503 or 504 (RFC 5861 §4). A 501
// or 505 is the origin's definite answer to the request, and reaches the
// client (a review's TestS63StaleIfErrorTakesEveryFiveHundredForAnOutage).
func originFailure(status int) bool {
	switch status {
	case http.StatusInternalServerError, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return true
	}
	return false
}

// answerFetchError serves stale if allowed, else an upstream error.
func (h *Handler) answerFetchError(w http.ResponseWriter, r *http.Request, m miss, err error) string {
	now := h.now()
	if m.stale != nil && h.staleOnErrorOK(m.stale, m.reqCC, now) {
		h.writeEntry(w, r, m.stale, now, staleOnError(0), nil)
		return ResultStaleError
	}
	h.writeUpstreamError(w, err)
	return ResultError
}

// outcome is what one upstream fetch produced for the request that led it.
type outcome struct {
	kind   outcomeKind
	err    error          // outError
	entry  *Entry         // outEntry: a complete response (304 update)
	resp   *http.Response // outStream: a response for this request alone
	status cacheStatus
	why    reason      // outStream: why it was not stored
	own    http.Header // per-user fields for this requester only
	result string      // edge_requests_total label
	reader *fillReader // outFill: the requester's reader, registered before the body
	keep   bool        // outSliced: the cluster lets this node keep what it fetched
}

type outcomeKind int

const (
	outError  outcomeKind = iota // nothing usable came back
	outStale                     // the origin failed; serve the stale entry
	outEntry                     // serve entry
	outStream                    // stream resp (not shareable)
	outFill                      // serve from the fill as its body arrives
	outSliced                    // entry is a manifest; resp's body holds its first slices
)

// lead fetches for r and answers it. f is the fill to publish to (nil when
// the request fetches for itself), ckey its coalescing key.
func (h *Handler) lead(w http.ResponseWriter, r *http.Request, f *fill, ckey string, m miss) string {
	slot, why := h.acquireUpstream(r)
	if why != "" {
		if f != nil {
			// Out of the coalescer first: a request that joined in the
			// meantime, woken by errOverload, asks again and leads its own
			// fetch (this refusal may be this client's bound, not theirs).
			h.co.done(ckey, f)
			f.publish(nil, false, errOverload)
		}
		return h.refuseOverload(w, r, why)
	}
	if f == nil {
		f = newFill(m.purgesAt, m.wait) // not coalesced, but the body still streams through a fill
	}
	m.slot = slot
	ctx, hintsDone := h.relayEarlyHints(context.WithoutCancel(r.Context()), w, r)
	defer hintsDone() // a panic too ends the writer (stop may be called twice)
	o := h.fillFrom(ctx, f, ckey, r, m)
	hintsDone()
	if o.kind != outStream && o.kind != outFill {
		slot.release()
	}
	switch o.kind {
	case outStale:
		h.writeEntry(w, r, m.stale, h.now(), o.status, nil)
	case outEntry:
		h.writeEntry(w, r, o.entry, h.now(), o.status, o.own)
	case outStream:
		if o.why == whyTooLarge && len(r.Header["Range"]) > 0 {
			// The client wanted a part of an object we do not store:
			// ask the origin for that part instead of sending it all,
			// with the slot of this fetch given back first.
			o.resp.Body.Close()
			slot.release()
			return h.servePass(w, r, whyTooLarge)
		}
		release := slot.releaser()
		defer release() // the upstream connection stays in use while we stream, unless spooled
		defer o.resp.Body.Close()
		h.stream(w, r, o.resp, o.status, release)
	case outSliced:
		// The leading stream is read outside the upstream slots (the
		// slot went back above): one per sliced object being revealed.
		h.serveSliced(w, r, o.entry, o.status, o.own, o.resp.Body, o.keep, f.purges)
	case outFill:
		// The pump gives the slot back when the body is in: a body it
		// must trim keeps the origin connection, and its slot, as long as
		// its slowest reader.
		h.serveFill(w, r, f, o.reader, o.status, o.own)
		h.chargeClientFor(r, f)
	default:
		h.writeUpstreamError(w, o.err)
	}
	return o.result
}

// chargeClientFor counts a fill r led against r's client until the fill's
// body ends, when it goes on after r (a client that left, a HEAD, a 304 or
// a range answered from it): a body that can be stored is fetched whole
// with no reader left, holding its upstream slot. Without this a client
// bounded by limits.max_inflight_per_client held as many slots as it liked
// by leaving each miss once its head came (a review: one address, one
// short connection at a time, took every slot and every other client's
// misses were refused 503). Such fills count only when the client would
// start another fetch (mayLead): its hits, and requests joining a fill
// under way, are not refused for them.
func (h *Handler) chargeClientFor(r *http.Request, f *fill) {
	if inboundOf(r).Relayed {
		return // a peer's request: the ingress holds its client to the bound
	}
	ip := clientaddr.OfRemote(r.RemoteAddr)
	h.clients.leave(ip)
	if !f.afterBody(func() { h.clients.ended(ip) }) {
		h.clients.ended(ip)
	}
}

var errOverload = errors.New("proxy: too many upstream requests in flight")

// filling is one fill under way: the fill, its registration, and the
// upstream answer it is acting on.
type filling struct {
	f        *fill
	ckey     string // f's coalescing key ("" if f is not registered)
	m        miss
	res      Result
	reqTime  time.Time
	respTime time.Time
	purges   uint64      // the handler's purge count when the fill started
	own      http.Header // the response's per-user fields
}

// upstreamStatus is the Cache-Status of the cluster peer that answered
// (its members, for the answer's field), "" when the origin did: an
// origin's Cache-Status is not a cache on this path's to repeat.
func (fl *filling) upstreamStatus() string {
	if fl.res.From != UpstreamPeer || fl.res.Resp == nil {
		return ""
	}
	return strings.Join(fl.res.Resp.Header.Values("Cache-Status"), ", ")
}

// done unregisters the fill: later requests no longer join it.
func (h *Handler) done(fl *filling) {
	if fl.ckey != "" {
		h.co.done(fl.ckey, fl.f)
	}
}

// stillCurrent reports whether no purge naming e came since the fill
// started, so that storing e does not undo one.
func (h *Handler) stillCurrent(fl *filling, e *Entry) bool {
	return !h.purges.touchedSince(fl.purges, e.Key, e.Header)
}

// putUnlessPurged stores e unless a purge naming it came since the purge
// count was purges. A purge between the check and the Put is caught by a
// second check after it, and e's variant goes again (unless a later fill
// has replaced it): Purge records itself before it removes, so either it
// removes e or the second check sees it.
func (h *Handler) putUnlessPurged(e *Entry, purges uint64) bool {
	if h.purges.touchedSince(purges, e.Key, e.Header) {
		return false
	}
	h.store.Put(e)
	if h.purges.touchedSince(purges, e.Key, e.Header) {
		h.store.RemoveVariantUnlessReplaced(e)
		return false
	}
	return true
}

// fillFrom is the one fill path, used by client misses and by background
// refresh: fetch (validating m.stale if set) and act on the answer, which
// storageFor and shareable judge: apply a 304, serve stale on a server
// error, or publish the outcome to f's waiters and, for a storable
// response, pump its body into f and the store. ckey is f's coalescing
// key ("" if f is not registered).
func (h *Handler) fillFrom(ctx context.Context, f *fill, ckey string, r *http.Request, m miss) outcome {
	fl := &filling{f: f, ckey: ckey, m: m, purges: f.purges}
	out := h.outboundRequest(r, ctx, true)
	if m.stale != nil {
		setValidators(out.Header, m.stale)
	}
	fl.reqTime = h.now()
	res, err := h.fetchFor(ctx, m.key, out, f.waitAt, m.stale != nil)
	if err != nil {
		f.publish(nil, false, err)
		h.done(fl)
		if m.stale != nil && h.staleOnErrorOK(m.stale, m.reqCC, h.now()) {
			return outcome{kind: outStale, status: staleOnError(0), result: ResultStaleError}
		}
		return outcome{kind: outError, err: err, result: ResultError}
	}
	fl.res, fl.respTime, fl.own = res, h.now(), perUserFields(res.Resp.Header, h.policy().TargetedFields)
	resp := res.Resp

	switch {
	case m.stale != nil && resp.StatusCode == http.StatusNotModified:
		resp.Body.Close()
		if m.ruling != nil {
			m.ruling.apply304Rule(resp, m.stale.Status)
		}
		return h.revalidated(fl, r)
	case m.stale != nil && originFailure(resp.StatusCode) && h.staleOnErrorOK(m.stale, m.reqCC, fl.respTime):
		resp.Body.Close()
		// Waiters serve their own stale copy (or an error) rather than each
		// asking a failing origin again.
		f.publish(nil, false, errOriginFailed)
		h.done(fl)
		return outcome{kind: outStale, status: staleOnError(resp.StatusCode), result: ResultStaleError}
	}

	how, why := h.storageFor(resp, m, true)
	if how == storeSliced {
		if man := h.manifestFor(r, m, resp, fl.reqTime, fl.respTime); man != nil {
			return h.fillSliced(fl, man)
		}
		how, why = h.storageFor(resp, m, false)
	}
	var e *Entry
	if how == storeWhole {
		e = h.newEntry(m.key, resp, fl.reqTime, fl.respTime, m.ruling.lifetime(resp.StatusCode))
		e.VaryKey = h.varyKey(e.VaryNames, r)
		why = h.shareable(e, r, m)
	}
	if why != "" {
		h.notStored(m, why, resp.StatusCode)
		if m.stale != nil && m.aboutTheURL(why, resp.StatusCode) {
			h.store.RemoveVariant(m.stale)
		}
		f.publish(nil, false, nil)
		h.done(fl)
		return outcome{kind: outStream, resp: resp, why: why, own: fl.own, result: ResultMiss,
			status: forwarded(m.fwd).withStatus(resp.StatusCode).withDetail(string(why)).withUpstream(fl.upstreamStatus())}
	}
	return h.fillWhole(fl, e)
}

// storage is what a response fetched for a miss becomes.
type storage int

const (
	storeNothing storage = iota // streamed to its requester alone
	storeWhole                  // stored as its body arrives, shared with waiters
	storeSliced                 // stored as a manifest of slices fetched apart
)

// storageFor decides whether the response to m may be stored and how, by
// RFC 9111's rules and this cache's limits: the why of storeNothing says
// why not. Slices are made only if slices allows and never for a request
// with keyed fields: slices are shared by URL, so one made from a
// request's own fields would reach everyone. Whether the stored response
// may then be shared is shareable's to say, once it is an entry.
func (h *Handler) storageFor(resp *http.Response, m miss, slices bool) (storage, reason) {
	if ok, why := h.policy().storableUnder(m.ruling.lifetime(resp.StatusCode), m.reqCC, m.hasAuth, resp.StatusCode, resp.Header); !ok {
		return storeNothing, why
	}
	switch {
	case slices && h.cfg.SliceBytes > 0 && resp.ContentLength > h.cfg.SliceBytes && !m.keyed:
		return storeSliced, ""
	case resp.ContentLength > h.cfg.MaxObjectBytes:
		return storeNothing, whyTooLarge
	case resp.ContentLength > h.cfg.MaxBufferedBytes-h.buffered.Load():
		// No budget to buffer it: stream it to this request alone, with the
		// client's pace holding back the origin.
		return storeNothing, whyBufferFull
	}
	return storeWhole, ""
}

// revalidated applies a 304 to the stale entry: the updated entry is
// stored and shared, or, when the 304 made it one that may not be stored
// (private, no-store, …) or this request may not share, it is this
// requester's alone.
func (h *Handler) revalidated(fl *filling, r *http.Request) outcome {
	m, resp := fl.m, fl.res.Resp
	e := h.updateFrom304(m.stale, resp, fl.reqTime, fl.respTime)
	status := forwarded(m.fwd).withStatus(http.StatusNotModified).withUpstream(fl.upstreamStatus())
	// The requester's own fields: those the 304's lists name (fl.own) and
	// those the updated copy's lists name, which updateFrom304 kept out
	// of the copy.
	updatedNames, _ := namedFields(e.Header, h.policy().TargetedFields)
	respNames, _ := namedFields(resp.Header, h.policy().TargetedFields)
	own := addNamed(fl.own, resp.Header, updatedNames)
	why := h.shareable(e, r, m)
	if why == "" {
		why = h.own304(resp.Header, m)
	}
	cookieNamed := isNamed(updatedNames, "Set-Cookie") || isNamed(respNames, "Set-Cookie")
	if why == "" && !h.policy().StoreSetCookie && len(own["Set-Cookie"]) > 0 && !cookieNamed {
		// The 304 sets a cookie: as a 200 that sets one is never stored
		// (cache.store_set_cookie), its fields are this requester's alone,
		// and none of them are merged into the copy everyone gets.
		why = whySetCookie
	}
	if why == "" && !h.sameVary(e, m.stale) {
		// The 304 says the page now varies on other fields: the stored
		// copy was chosen by the old ones, and what this 304 validated it
		// for is this request's values of the new ones. It answers this
		// request alone, and the stored copy goes (the next request for
		// the page fetches it and stores it under the new Vary).
		why = whyVaryChanged
		h.store.RemoveVariant(m.stale)
	}
	if why != "" {
		h.notStored(m, why, http.StatusNotModified)
		if m.aboutTheURL(why, http.StatusNotModified) {
			h.store.RemoveVariant(m.stale)
		}
		fl.f.publish(nil, false, nil)
		h.done(fl)
		return outcome{kind: outEntry, entry: e, own: own, status: status.withDetail(string(why)), result: ResultRevalidated}
	}
	if fl.res.Keep && h.putUnlessPurged(e, fl.purges) {
		// The updated copy is stored (RFC 9211 "stored"), as a 200's
		// would be: what is shared says so (browser_ttl reads it for a
		// cookie's or credentials' answer: a review's
		// TestS58BrowserTTLSkipsACookieHoldersRevalidatedSharedAnswer).
		status = status.markStored()
	}
	fl.f.completeWith(e)
	fl.f.upstream = fl.upstreamStatus()
	fl.f.publish(e, true, nil)
	h.done(fl)
	return outcome{kind: outEntry, entry: e, own: own, status: status, result: ResultRevalidated}
}

// fillSliced stores a sliced object's manifest; the response's body holds
// its first slices, which the leader reveals.
func (h *Handler) fillSliced(fl *filling, man *Entry) outcome {
	// The first slices, read from this answer's stream, are kept only if
	// its manifest was: a purge since the fill began that names the page
	// keeps both out (a review's TestReviewStreamSlicesOfAFillOvertakenByAPurgeAreNotStored).
	kept := fl.res.Keep && h.putUnlessPurged(man, fl.purges)
	h.passes.Remove(fl.m.passKey)
	h.large.Remove(fl.m.passKey)
	fl.f.completeWith(man)
	fl.f.upstream = fl.upstreamStatus()
	fl.f.publish(man, true, nil)
	h.done(fl)
	return outcome{kind: outSliced, entry: man, resp: fl.res.Resp, own: fl.own, keep: kept, result: ResultMiss,
		status: forwarded(fl.m.fwd).withStatus(fl.res.Resp.StatusCode).markStored().withDetail("sliced").withUpstream(fl.upstreamStatus())}
}

// fillWhole publishes e to the fill's waiters and pumps the body into the
// fill in the background, storing it when it ends whole.
func (h *Handler) fillWhole(fl *filling, e *Entry) outcome {
	f, m, res, resp := fl.f, fl.m, fl.res, fl.res.Resp
	status := forwarded(m.fwd).withStatus(resp.StatusCode).markStored().withUpstream(fl.upstreamStatus())
	notKept := whyQRule
	if res.PurgeHeld {
		notKept = whyPurged
	}
	if !res.Keep {
		status = forwarded(m.fwd).withStatus(resp.StatusCode).withDetail(string(notKept)).withUpstream(fl.upstreamStatus())
	}
	if resp.ContentLength >= 0 {
		e.Header["Content-Length"] = []string{strconv.FormatInt(resp.ContentLength, 10)}
	} else {
		delete(e.Header, "Content-Length")
	}
	f.upstream = fl.upstreamStatus()
	f.peerBody = res.From == UpstreamPeer && !res.InMemory
	if res.PurgeHeld {
		// Held back from the store by a purge under way: it answers the
		// requests already waiting on it (they asked during the purge's
		// round), never one that comes later, which once the purge has
		// returned must not be served what it named (a review's
		// TestS59AHeldFillIsJoinedByARequestAfterThePurgeReturned).
		h.done(fl)
	}
	f.publish(e, true, nil)
	var rd *fillReader
	if !m.background {
		rd, _ = f.reader() // before the pump starts: base is still 0
	}
	if m.slot.held() {
		// Given back as the body ends, before anyone waiting for the end
		// wakes (they may need the slot at once).
		f.bodyEnd = m.slot.release
	}
	f.spool = h.spool // a body that cannot be kept spills rather than wait for its slowest reader
	// Stored as the body ends whole, before its last bytes reach a reader
	// (under the fill's lock; nothing the store calls takes a fill's). The
	// insert hook (the cluster's indicator) runs after the lock.
	f.commit = func(whole *Entry) (after func()) {
		switch {
		case !res.Keep:
			h.countNotStored(notKept)
		case res.Resumed != nil && res.Resumed():
			h.countNotStored(whyResumed)
		case !h.stillCurrent(fl, whole):
			h.countNotStored(whyPurged)
		default:
			ok, inserted := h.store.putQuiet(whole)
			if ok {
				h.passes.Remove(m.passKey)
			}
			if !h.stillCurrent(fl, whole) {
				h.store.RemoveVariantUnlessReplaced(whole) // a purge came between the check and the Put
			}
			return inserted
		}
		return nil
	}
	inline := res.InMemory && resp.ContentLength >= 0 && resp.ContentLength < trimWindow
	pump := func() {
		defer resp.Body.Close()
		var body io.Reader = resp.Body
		if inline {
			body = io.LimitReader(body, resp.ContentLength) // never past what cannot block
		}
		err := f.pump(body, resp.ContentLength, h.cfg.MaxObjectBytes, h)
		switch {
		case err != nil:
			h.log.Debug("reading upstream body", "key", m.key, "err", err)
			h.countNotStored(whyBodyError)
		case f.final() == nil: // an empty body is whole too: ask the fill, not the slice
			h.notStored(m, f.trimReason(), resp.StatusCode)
		}
		h.done(fl) // after the Put: a request arriving now finds the entry
	}
	if inline {
		// Already read whole: pumping it cannot block (below trimWindow
		// the pump never waits for a reader to make room), and done here
		// the leader finds it in and sends header and body together (a
		// pump goroutine would have it flush the header alone while it
		// waits).
		pump()
	} else {
		h.bg.Go(pump)
	}
	return outcome{kind: outFill, own: fl.own, status: status, result: ResultMiss, reader: rd}
}

// errOriginFailed tells waiters that the origin answered with a server
// error while the leader served its stale copy.
var errOriginFailed = errors.New("proxy: the origin answered with a server error")

// shareable applies the rules beyond RFC 9111's storability that decide
// whether a response may be stored and handed to other users, and says
// why not ("" when it may): it must have been fresh at some point or be
// validatable, and a freshness that is only heuristic is not a
// declaration that a response to a request with credentials or cookies
// is the same for everyone.
func (h *Handler) shareable(e *Entry, r *http.Request, m miss) reason {
	if ok, why := h.policy().storableUnder(e.life, m.reqCC, m.hasAuth, e.Status, e.Header); !ok {
		return why
	}
	if e.lifetime <= 0 && e.etag == "" && !e.hasLastMod && !e.cc.NoCache {
		// Never fresh and never validatable: storing it could only ever
		// serve it to someone it was not meant for.
		return whyNoFreshness
	}
	if e.heuristic && (len(r.Header["Cookie"]) > 0 || m.hasAuth) {
		return whyPersonalHeuristic
	}
	if h.redirectsToOtherScheme(e, r) {
		return whySchemeRedirect
	}
	return ""
}

// own304 judges a 304's own directives as a 200's would be judged (its
// targeted field if it has one, else its Cache-Control). The merged copy
// shareable reads keeps the stored copy's targeted field and its public:
// a 304 saying private or no-store under a stored CDN-Cache-Control, or
// answering a request with credentials without saying it may be shared,
// was merged into the copy everyone gets, its fields (X-Account: alice)
// with it (a review's TestS28A304PrivateIsNotOverriddenByTheStoredTargetedField
// and TestS28A304ToCredentialsIsNotMergedUnderTheStoredPublic).
func (h *Handler) own304(hdr http.Header, m miss) reason {
	cc, _ := h.policy().effectiveCC(hdr)
	_, namesRead := namedFields(hdr, h.policy().TargetedFields)
	switch {
	case cc.NoStore && !cc.MustUnderstand:
		return whyNoStore
	case cc.Private:
		return whyPrivate
	case !namesRead:
		return whyNoCacheFields
	case m.hasAuth && !cc.Public && cc.SMaxAge == unset && !cc.MustReval:
		return whyAuthorization
	}
	return ""
}

// notStored counts a response of status that was not stored and
// remembers what the reason says about the URL, when the status may make
// the URL pass (passesForURL).
func (h *Handler) notStored(m miss, why reason, status int) {
	h.countNotStored(why)
	if !passesForURL(status) {
		return
	}
	switch why.remembered() {
	case rememberLarge:
		h.large.Add(m.passKey, struct{}{})
	case rememberPass:
		h.passes.Add(m.passKey, struct{}{})
	}
}

func (h *Handler) countNotStored(why reason) {
	h.metrics.NotStored.WithLabelValues(string(why)).Inc()
}

// fetch sends req upstream and counts the outcome. req was made from the
// client's request (outboundRequest), whose Inbound it still carries.
func (h *Handler) fetch(ctx context.Context, key string, req *http.Request) (Result, error) {
	return h.fetchFor(ctx, key, req, h.waitOf(req, key), false)
}

// fetchFor is fetch for a fill standing at w in the wait order;
// revalidates says the fill validates a stored copy (FetchRequest).
func (h *Handler) fetchFor(ctx context.Context, key string, req *http.Request, w fillWait, revalidates bool) (Result, error) {
	in := inboundOf(req)
	t := h.now()
	res, err := h.fetcher.Fetch(ctx, FetchRequest{Key: key, Req: req, Site: in.Site, Route: in.Route, Order: w.order, Direct: w.direct, Revalidates: revalidates})
	d := h.now().Sub(t)
	h.metrics.OriginDuration.Observe(d.Seconds())
	if info := in.Upstream; info != nil {
		info.dur.Store(int64(d))
		from := res.From
		if from == "" {
			from = UpstreamOrigin
		}
		info.SetFrom(from)
		if res.Addr != "" {
			info.addr.Store(&res.Addr)
		}
		info.retries.Add(int64(res.Retries))
	}
	if err != nil {
		h.metrics.OriginRequests.WithLabelValues("error").Inc()
		return res, err
	}
	h.metrics.OriginRequests.WithLabelValues(statusClass(res.Resp.StatusCode)).Inc()
	// The message as it may be forwarded (RFC 9110 §7.6.1), for everyone
	// who reads it from here: the requester's own fields were taken from
	// it raw, and a per-user field the origin named in Connection reached
	// the client that led a stored fill (a review's
	// TestS73PerUserFieldNamedInConnectionIsNotForwarded).
	removeHopByHop(res.Resp.Header)
	applyResponseRule(req, res.Resp)
	if g := in.ruling; g != nil && g.req != nil && !g.set.Retired() {
		h.metrics.rules.origin.WithLabelValues(g.site, g.req.Name).Inc()
	}
	if c := res.Resp.StatusCode; (c < 200 || c == http.StatusNoContent || c == http.StatusNotModified) && res.Resp.Body != nil && res.Resp.Body != http.NoBody {
		// These statuses have no content (RFC 9110 §15.3.5, §15.4.5): the
		// body is not read, so whatever an upstream put after the header
		// (or an error its reader returns) cannot decide the response, and
		// whether it did cannot depend on timing.
		_ = res.Resp.Body.Close()
		res.Resp.Body = http.NoBody
	}
	return res, nil
}

func statusClass(code int) string {
	switch {
	case code < 200:
		return "1xx"
	case code < 300:
		return "2xx"
	case code < 400:
		return "3xx"
	case code < 500:
		return "4xx"
	}
	return "5xx"
}

// staleOnErrorOK reports whether e may be served because the origin
// failed. A response that was never fresh is never served this way: it
// was never meant to be reused.
func (h *Handler) staleOnErrorOK(e *Entry, reqCC CacheControl, now time.Time) bool {
	if e.lifetime <= 0 {
		return false
	}
	staleness := e.Age(now) - e.lifetime
	if e.staleForbidden() && (!e.stale.Load() || staleness > 0 || e.cc.NoCache) {
		// must-revalidate and its kin forbid stale use; a soft purge that
		// marked a copy stale before its time lets it stand in for a
		// failing origin while it is still fresh by its own lifetime, and
		// never one that has expired or says no-cache (used only after a
		// validation that succeeded): a purge never loosens a directive.
		return false
	}
	if staleness <= 0 {
		return true
	}
	window := h.policy().staleWindow(e.cc.StaleIfError, h.policy().StaleIfErrorDefault)
	if reqCC.StaleIfError != unset {
		if w := h.policy().staleWindow(reqCC.StaleIfError, 0); w > window {
			window = w
		}
	}
	return staleness <= window
}

// perUserResponseFields are response fields meant for the one user whose
// request caused them. They are never stored and never merged into a
// stored entry; the requester still receives its own.
// (Set-Cookie2 is not among them: RFC 6265 retired it and no browser
// applies it, so it cannot carry a session; the conformance suite expects
// it stored like any field.)
var perUserResponseFields = [...]string{"Set-Cookie", "Authentication-Info", "Proxy-Authentication-Info"}

// altSvc is the origin's advertisement of its own alternative endpoints
// (RFC 7838): about the origin's connections, not the edge's. Passed on,
// it replaced the edge's own (HTTP/3 on its UDP port): an origin's
// "clear" turned HTTP/3 off for every browser of the site, and its
// h3=":443" sent browsers of an edge without HTTP/3 to a UDP port nothing
// answers, remembered for its ma (a review). Never stored nor forwarded.
const altSvc = "Alt-Svc"

// perUserFields returns the per-user fields of a response (nil if none):
// perUserResponseFields and the fields its directives name as one
// user's (namedFields).
func perUserFields(h http.Header, targeted []string) http.Header {
	var own http.Header
	for _, k := range perUserResponseFields {
		if v := h[k]; len(v) > 0 {
			if own == nil {
				own = http.Header{}
			}
			own[k] = v
		}
	}
	names, _ := namedFields(h, targeted)
	return addNamed(own, h, names)
}

// addNamed copies the fields of src that names name (whatever their
// case) into own, made if nil, and returns it.
func addNamed(own, src http.Header, names []string) http.Header {
	for k, v := range src {
		if len(v) > 0 && isNamed(names, k) {
			if own == nil {
				own = http.Header{}
			}
			own[k] = v
		}
	}
	return own
}

// isNamed reports whether field is among names, whatever its case.
func isNamed(names []string, field string) bool {
	return slices.ContainsFunc(names, func(n string) bool { return strings.EqualFold(n, field) })
}

// namedFields lists the fields a response's qualified no-cache="…" and
// private="…" name (RFC 9111 §5.2.2.4 and §5.2.2.7): the rest of the
// response may be stored and shared, those fields may not. They are
// taken out of the stored copy and given to the requester alone, as
// Set-Cookie is, so no other request is ever answered with them (a
// shared cache that kept them would owe a revalidation per use, and a
// 304 that did not repeat them revalidated the first user's values for
// the next: a review's TestS28NoCacheNamedFieldIsNotReusedForAnotherUser).
// The lists of Cache-Control and of every targeted field present are
// read, whichever governs: naming a field only keeps it out of the
// shared copy, so the union is the safe reading. ok is false when that
// cannot be done: a list that could not be read, or one naming a field
// the cache reads to keep, select or describe the stored body (its
// lifetime, its Vary, its coding or length); such a response is not
// stored.
func namedFields(h http.Header, targeted []string) (names []string, ok bool) {
	ok = true
	read := func(name string) {
		if len(h.Values(name)) == 0 {
			return
		}
		cc := ParseCacheControl(h, name)
		if cc.FieldsUnread {
			ok = false
		}
		names = append(names, cc.Fields...)
	}
	read("Cache-Control")
	for _, name := range targeted {
		read(name)
	}
	for _, n := range names {
		if slices.Contains(structuralFields[:], n) || isEdgeField(n) || isNamed(targeted, n) {
			ok = false
		}
	}
	return names, ok
}

// structuralFields are the fields a stored copy cannot lose: they give
// its lifetime, select it, describe its body, or name the tags a purge
// finds it by (without Surrogate-Key a tag purge missed the page: a
// review's TestS29NamedPurgeTagFieldEscapesTagPurge). A response naming
// one as one user's is not stored (namedFields).
var structuralFields = [...]string{
	"Cache-Control", "Expires", "Pragma", "Vary", "Date", "Age", "Etag", "Last-Modified",
	"Content-Type", "Content-Encoding", "Content-Length", "Content-Range", "Transfer-Encoding",
	"Surrogate-Key", "Cache-Tag",
}

// deleteNamed removes the named fields from h, whatever their case.
func deleteNamed(h http.Header, names []string) {
	for k := range h {
		if isNamed(names, k) {
			delete(h, k)
		}
	}
}

// sharedHeader copies a response header for storing: no hop-by-hop fields,
// no per-user fields, no peer-protocol fields. The targeted cache-control
// fields the cache obeys stay, Edge-Cache-Control among them: finishEntry
// reads the stored copy's lifetime from them, and without it a response
// stored because Edge-Cache-Control allowed it lived by Cache-Control's
// max-age (an hour for 5 s: a review's
// TestS24EdgeCacheControlGovernsTheStoredLifetime), here and on every
// peer and restart that read the copy.
func sharedHeader(h http.Header, targeted []string) http.Header {
	hdr := h.Clone()
	removeHopByHop(hdr)
	delete(hdr, altSvc)
	for _, k := range perUserResponseFields {
		delete(hdr, k)
	}
	if names, _ := namedFields(h, targeted); len(names) > 0 {
		deleteNamed(hdr, names)
	}
	for k := range hdr {
		if isEdgeField(k) && !slices.Contains(targeted, k) {
			delete(hdr, k)
		}
	}
	return hdr
}

// The targeted fields the cache obeys that sit in its own Edge- namespace
// (Edge-Cache-Control) are kept in the stored copy and in answers to
// peers, which read the page's lifetime from them, and are not given to
// clients (a review found them reaching clients from stored copies
// only: a cache in front would obey them on hits and not on passes).
func isEdgeField(name string) bool { return len(name) >= 5 && strings.EqualFold(name[:5], "edge-") }

// dropEdgeTargeted removes the Edge- targeted fields from a client's answer.
func (h *Handler) dropEdgeTargeted(hdr http.Header) {
	for _, name := range h.policy().TargetedFields {
		if isEdgeField(name) {
			delete(hdr, name)
		}
	}
}

// keepEdgeTargeted copies the Edge- targeted fields of from into a peer's
// answer.
func (h *Handler) keepEdgeTargeted(hdr, from http.Header) {
	for _, name := range h.policy().TargetedFields {
		if v := from[name]; len(v) > 0 && isEdgeField(name) {
			hdr[name] = v
		}
	}
}

// newEntry builds an entry (without its body) from an upstream response.
func (h *Handler) newEntry(key string, resp *http.Response, reqTime, respTime time.Time, life *rules.Lifetime) *Entry {
	hdr := sharedHeader(resp.Header, h.policy().TargetedFields)
	delete(hdr, sliceSizeField) // only the edge makes manifests and slices (slice.go)
	delete(hdr, sliceOfField)
	names, _ := VaryNames(hdr)
	if h.cfg.Compression != nil {
		// Every request went upstream with the same Accept-Encoding, so
		// it cannot select a variant; keeping it would only cost lookups.
		names = slices.DeleteFunc(names, func(n string) bool { return n == "accept-encoding" })
	}
	e := &Entry{
		Key: key, VaryNames: names,
		Status: resp.StatusCode, Header: hdr,
		RequestTime: reqTime, ResponseTime: respTime, life: life,
	}
	h.classify(e)
	h.policy().finishEntry(e)
	return e
}

// updateFrom304 returns a copy of stale with the header fields of a 304
// applied (RFC 9111 §3.2), sharing the stored body. Per-user fields of the
// 304 are not applied: they belong to the requester alone.
func (h *Handler) updateFrom304(stale *Entry, resp *http.Response, reqTime, respTime time.Time) *Entry {
	hdr := stale.Header.Clone()
	upd := sharedHeader(resp.Header, h.policy().TargetedFields)
	delete(upd, sliceSizeField)
	delete(upd, sliceOfField)
	// Fields that describe the stored body, or select it, stay as stored:
	// a 304 cannot change the representation it validated (RFC 9111 §3.2).
	for _, k := range [...]string{"Content-Length", "Content-Encoding", "Content-Range", "Content-Md5", "Etag"} {
		delete(upd, k)
	}
	for k, v := range upd {
		hdr[k] = v
	}
	// The stored copy's lists name fields the 304 may carry (X-Account:
	// bob under a stored no-cache="X-Account"): they are bob's, as the
	// 304's own lists' are.
	if names, _ := namedFields(hdr, h.policy().TargetedFields); len(names) > 0 {
		deleteNamed(hdr, names)
	}
	e := &Entry{
		Key: stale.Key, VaryNames: stale.VaryNames, VaryKey: stale.VaryKey,
		Status: stale.Status, Header: hdr, Body: stale.Body,
		RequestTime: reqTime, ResponseTime: respTime, life: stale.life,
	}
	h.classify(e)
	h.policy().finishEntry(e)
	return e
}

// sameVary reports whether e, updated from a 304, selects by the same
// request fields as stale: the Vary names its merged header gives, as
// newEntry reads them, against the ones stale was stored under.
func (h *Handler) sameVary(e, stale *Entry) bool {
	names, _ := VaryNames(e.Header)
	if h.cfg.Compression != nil {
		names = slices.DeleteFunc(names, func(n string) bool { return n == "accept-encoding" })
	}
	return slices.Equal(names, stale.VaryNames)
}

// setValidators turns out into a conditional request for e: its entity
// tag if it has one (RFC 9111 §4.3.1 MUST), its Last-Modified only if it
// has none. Sending both (a MAY) let an origin that judges the date alone,
// against RFC 9110 §13.1.3's order, answer 304 for a changed page with a
// new ETag, and the stored body was freshened as the new one (a review).
func setValidators(hdr http.Header, e *Entry) {
	if e.etag != "" {
		hdr.Set("If-None-Match", e.etag)
		return
	}
	if lm := e.Header.Get("Last-Modified"); lm != "" {
		hdr.Set("If-Modified-Since", lm)
	}
}

// refreshInBackground revalidates e once, however many requests see it
// stale, through the same fill path as a client miss.
// purgesAt is the purge count before the lookup that found e.
func (h *Handler) refreshInBackground(r *http.Request, key string, e *Entry, reqCC CacheControl, hasAuth bool, purgesAt uint64) {
	ckey := coalesceKey(key, e.VaryKey)
	wt := h.waitOf(r, key)
	f, leader := h.co.join(ckey, purgesAt, wt)
	if !leader {
		return // a fetch for this variant is already under way
	}
	// A refresh takes an upstream slot as the miss it stands for would
	// (and within the client's bound): before, refreshes took none, so a
	// soft purge of many pages followed by their traffic started one
	// origin fetch per page at once, past limits.max_inflight and the
	// sites' parts. With none free the copy stays stale, served as it is,
	// and a later request refreshes it.
	slot, refusal := h.acquireUpstream(r)
	if refusal != "" {
		h.co.done(ckey, f) // before the waiters wake, as in lead
		f.publish(nil, false, errOverload)
		h.metrics.Refreshes.WithLabelValues(refreshRefused).Inc()
		return
	}
	// Counted against the client that set it off, as a fill its request
	// left is (chargeClientFor): the request ends at once with the stale
	// copy, so without this one client asking for many stale pages held
	// every slot with their refreshes (a review's
	// TestS37OneClientsRefreshesStayWithinItsBound).
	ended := func() {}
	if !inboundOf(r).Relayed {
		ip := clientaddr.OfRemote(r.RemoteAddr)
		h.clients.leave(ip)
		ended = sync.OnceFunc(func() { h.clients.ended(ip) })
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), h.cfg.RefreshTimeout)
	rr := r.Clone(ctx)
	h.bg.Go(func() {
		defer cancel()
		// The refresh carries the triggering request's credentials and
		// directives, so the same storability rules apply to it.
		m := h.missFor(key, r, purgesAt)
		m.stale, m.reqCC, m.hasAuth, m.fwd, m.background, m.wait = e, reqCC, hasAuth, "stale", true, wt
		m.slot = slot // a fill's pump gives it back as the body ends
		o := h.fillFrom(ctx, f, ckey, rr, m)
		if o.kind != outFill {
			defer slot.release()
			defer ended()
		} else if !f.afterBody(ended) {
			ended() // the body is in already
		}
		switch o.kind {
		case outEntry:
			h.metrics.Refreshes.WithLabelValues(refreshOK).Inc()
		case outFill:
			// The pump runs until the body is in; wait for it so that the
			// refresh's deadline does not cut it short.
			f.waitDone(ctx)
			h.metrics.Refreshes.WithLabelValues(refreshOK).Inc()
		case outStream:
			o.resp.Body.Close()
			h.metrics.Refreshes.WithLabelValues(refreshUncacheable).Inc()
		case outSliced:
			// The new manifest is stored; its slices are fetched when
			// asked for. Nobody reads the first ones this answer carries.
			o.resp.Body.Close()
			h.metrics.Refreshes.WithLabelValues(refreshOK).Inc()
		default:
			h.metrics.Refreshes.WithLabelValues(refreshError).Inc()
		}
	})
}

// Outcomes of a background refresh (edge_background_refreshes_total).
const (
	refreshOK          = "ok"          // stored (or freshened by a 304)
	refreshUncacheable = "uncacheable" // the answer may not be stored
	refreshError       = "error"       // the origin failed
	refreshRefused     = "refused"     // no upstream slot: the copy stays stale for now
)

// refreshOutcomes are all of them, for metrics that start at zero.
var refreshOutcomes = []string{refreshOK, refreshUncacheable, refreshError, refreshRefused}

// bodyTooLarge says err is, or wraps, a request body's going past
// limits.max_body_bytes.
func bodyTooLarge(err error) bool {
	var tooLarge *http.MaxBytesError
	return errors.As(err, &tooLarge)
}

// servePass forwards r without using or filling the store. Unsafe methods
// invalidate what they may have changed (RFC 9111 §4.4).
func (h *Handler) servePass(w http.ResponseWriter, r *http.Request, why reason) string {
	// The body first, so that a slow upload holds no upstream slot
	// (upload.go).
	bodyDone, err := h.bufferBody(r)
	if err != nil {
		timedOut := bodyTimedOut(r.Body)
		dropUnreadBody(r)
		if timedOut {
			return h.refuseSlowBody(w)
		}
		if bodyTooLarge(err) {
			// A body of unknown length past limits.max_body_bytes (one
			// that declares more is refused before it is read).
			return h.refuse(w, r, http.StatusRequestEntityTooLarge, "body_too_large", "request body too large")
		}
		h.metrics.Rejected.WithLabelValues("body_incomplete").Inc()
		h.writeError(w, http.StatusBadRequest, refused("request", "body-incomplete"), "request body incomplete")
		return ResultRejected
	}
	defer bodyDone()
	slot, refusal := h.acquireUpstream(r)
	if refusal != "" {
		return h.refuseOverload(w, r, refusal)
	}
	release := slot.releaser()
	defer release()
	ctx, hintsDone := h.relayEarlyHints(r.Context(), w, r)
	defer hintsDone() // a panic too ends the writer (stop may be called twice)
	out := h.outboundRequest(r, ctx, false)
	res, err := h.fetch(ctx, h.requestKey(r), out)
	hintsDone()
	if err == nil && isSafe(r.Method) && h.splicesCodings(r, res.Resp) {
		// The origin's identity range would go onto a start the edge may
		// have sent encoded: the whole page instead, encoded again as it
		// streams (a review's TestS8RIfRangeDateOnAPassNeverSplices; a
		// type the edge never encodes keeps its 206, TestS9's).
		res.Resp.Body.Close()
		out = h.outboundRequest(r, r.Context(), false)
		delete(out.Header, "Range")
		delete(out.Header, "If-Range")
		res, err = h.fetch(r.Context(), h.requestKey(r), out)
	}
	if err != nil {
		timedOut := bodyTimedOut(r.Body)
		dropUnreadBody(r)
		if timedOut {
			return h.refuseSlowBody(w)
		}
		if bodyTooLarge(err) {
			// One streamed on (the spool could not take it whole) and
			// past the limit mid-way: the origin got a cut request,
			// which it drops; the client is told why (a review's
			// TestReviewChunkedPastMaxBodyIs413WhateverTheSpool).
			return h.refuse(w, r, http.StatusRequestEntityTooLarge, "body_too_large", "request body too large")
		}
		h.writeUpstreamError(w, err)
		return ResultError
	}
	resp := res.Resp
	defer resp.Body.Close()
	dropUnreadBody(r) // the origin has answered: the rest of the upload is not needed
	if !isSafe(r.Method) && resp.StatusCode < 400 {
		h.invalidate(r, resp)
	}
	h.stream(w, r, resp, forwarded("bypass").withStatus(resp.StatusCode).withDetail(string(why)), release)
	return ResultPass
}

// refuseSlowBody answers a request whose body failed its rate limit.
func (h *Handler) refuseSlowBody(w http.ResponseWriter) string {
	h.metrics.Rejected.WithLabelValues("slow_body").Inc()
	h.writeError(w, http.StatusRequestTimeout, refused("request", "slow-body"), "request body too slow")
	return ResultRejected
}

func isSafe(method string) bool {
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace:
		return true
	}
	return false
}

// invalidate removes the target URI and the same-origin Location and
// Content-Location URIs of a successful unsafe request.
func (h *Handler) invalidate(r *http.Request, resp *http.Response) {
	n := h.removeKey(h.requestKey(r))
	for _, field := range [...]string{"Location", "Content-Location"} {
		v := resp.Header.Get(field)
		if v == "" {
			continue
		}
		u, err := r.URL.Parse(v)
		if err != nil {
			continue
		}
		if u.Host != "" && !strings.EqualFold(u.Host, r.Host) {
			continue // another origin's URI: RFC 9111 §4.4 forbids invalidating it
		}
		n += h.removeKey(h.requestKeyFor(r, u.EscapedPath(), h.keyQuery(u.RawQuery)))
	}
	h.metrics.Invalidations.Add(float64(n))
}
