package proxy

import (
	"net/http"
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
	// names reports whether the purge names the page under key whose
	// answer has header hdr (Handler.PurgeScope); nil names everything.
	names func(key string, hdr http.Header) bool
	// byHeader: names needs the answer's header (a tag purge); asked
	// without one, the purge counts as naming the page.
	byHeader bool
}

// Load is the number of the latest purge begun: a fill records it when it
// starts (or its request looks the store up) and asks touched later.
func (l *purgeLog) Load() uint64 { return l.count.Load() }

// begin records a purge naming what names names (nil: everything) and
// returns its number. It is recorded before the purge removes anything,
// so a fill that stores after removal began sees it (putUnlessPurged).
func (l *purgeLog) begin(names func(string, http.Header) bool, byHeader bool) uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := l.count.Load() + 1
	l.recent[n%purgeLogSize] = purgeRecord{n: n, names: names, byHeader: byHeader}
	l.count.Store(n)
	return n
}

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
	l.mu.Lock()
	defer l.mu.Unlock()
	for n := from + 1; n <= to; n++ {
		r := l.recent[n%purgeLogSize]
		if r.n != n || r.names == nil || (hdr == nil && r.byHeader) || r.names(key, hdr) {
			return true
		}
	}
	return false
}

// touchedSince is touched from from up to the latest purge.
func (l *purgeLog) touchedSince(from uint64, key string, hdr http.Header) bool {
	return l.touched(from, l.Load(), key, hdr)
}
