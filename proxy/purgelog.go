package proxy

import (
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
)

// purgeLog numbers the purges this handler has begun and remembers what
// the latest purgeLogSize named, so that a fill (a coalesced fetch, a
// slice's flight, a background refresh) that began before a purge can
// ask whether that purge names what it is about to store or share.
//
// It replaces one node-wide count, under which any purge (an editor's
// purge of one article) stopped every fill under way on the node from
// storing what it fetched and from being joined: on a site that purges
// often, the whole node's misses went to the origin twice. A purge older
// than the log's memory counts as naming everything (what the count did).
type purgeLog struct {
	count  atomic.Uint64 // purges begun; the latest one's number
	mu     sync.Mutex
	recent [purgeLogSize]purgeRecord // purge n at recent[n%purgeLogSize]
}

// purgeLogSize is how many purges the log remembers: a fill lasts at most
// the origin's response time plus its body's transfer (seconds to a few
// minutes), and an operator's purges come at most tens a second; a fill
// that outlives this many purges is treated as purged, as before.
const purgeLogSize = 1024

type purgeRecord struct {
	n uint64
	// names reports whether a URL or prefix purge names the page under
	// key (Handler.PurgeScope); nil with tag "" names everything.
	names func(key string, hdr http.Header) bool
	// tag is a tag purge's tag: it names an answer that carries it, and
	// every page under keys, the keys it found carrying it, whatever a
	// variant's or a slice's own header says (Purge removes each key
	// with all its variants and slices: a slice's 206 may carry no tag
	// where its object's 200 did, a review's
	// TestReviewTagPurgeDoesNotStopAnUntaggedSliceOfATaggedObject).
	tag  string
	keys map[string]struct{}
}

// Load is the number of the latest purge begun: a fill records it when it
// starts (or its request looks the store up) and asks touched later.
func (l *purgeLog) Load() uint64 { return l.count.Load() }

// begin records a purge naming what names names, or, for a tag purge,
// what carries tag (both empty: everything), and returns its number. It
// is recorded before the purge removes anything, so a fill that stores
// after removal began sees it (putUnlessPurged).
func (l *purgeLog) begin(names func(string, http.Header) bool, tag string) uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := l.count.Load() + 1
	l.recent[n%purgeLogSize] = purgeRecord{n: n, names: names, tag: tag}
	l.count.Store(n)
	return n
}

// found adds the keys tag purge n found to what it names (by the key
// before any NUL: a slice found without its manifest names its object);
// called before it removes them. A purge that found more than
// purgeFoundMax keys names everything instead: the log's memory stays
// bounded (a review measured 426 MiB for 1,024 purges of 10,000 keys).
func (l *purgeLog) found(n uint64, keys []string) {
	if len(keys) == 0 {
		return
	}
	var set map[string]struct{}
	if len(keys) <= purgeFoundMax {
		set = make(map[string]struct{}, len(keys))
		for _, k := range keys {
			base, _, _ := strings.Cut(k, "\x00")
			set[base] = struct{}{}
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if r := &l.recent[n%purgeLogSize]; r.n == n {
		if set == nil {
			r.tag, r.names = "", nil // everything
			return
		}
		r.keys = set
	}
}

// purgeFoundMax is the most keys a tag purge's record holds: a tag on
// more pages than this (a site-wide tag) names every page for the fills
// under way when it comes, as one purge count did.
const purgeFoundMax = 4096

// touched reports whether a purge numbered after from and up to to may
// name the page under key whose answer has header hdr (nil: not known
// yet; a tag purge then counts). key may be a cache key or one extended
// after a NUL (a variant's coalescing key, a slice's key).
func (l *purgeLog) touched(from, to uint64, key string, hdr http.Header) bool {
	if to <= from {
		return false
	}
	if l == nil || to-from > purgeLogSize {
		return true
	}
	base, _, _ := strings.Cut(key, "\x00")
	var tags []string
	parsed := false
	l.mu.Lock()
	defer l.mu.Unlock()
	for n := from + 1; n <= to; n++ {
		r := &l.recent[n%purgeLogSize]
		switch {
		case r.n != n:
			return true
		case r.tag == "":
			if r.names == nil || r.names(key, hdr) {
				return true
			}
		case hdr == nil:
			return true
		default:
			if r.keys != nil {
				if _, ok := r.keys[base]; ok {
					return true
				}
			}
			if !parsed {
				// Once, whatever the number of tag purges, sorted for
				// their look-ups.
				tags, parsed = tagsOf(hdr), true
				slices.Sort(tags)
			}
			if _, ok := slices.BinarySearch(tags, r.tag); ok {
				return true
			}
		}
	}
	return false
}

// touchedSince is touched from from up to the latest purge.
func (l *purgeLog) touchedSince(from uint64, key string, hdr http.Header) bool {
	return l.touched(from, l.Load(), key, hdr)
}

// tagsOf is every tag an answer carries in Surrogate-Key or Cache-Tag, as
// hasTag reads them.
func tagsOf(hdr http.Header) []string {
	var out []string
	for _, name := range [...]string{"Surrogate-Key", "Cache-Tag"} {
		for _, v := range hdr.Values(name) {
			out = append(out, splitTags(v)...)
		}
	}
	return out
}
