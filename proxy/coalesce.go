package proxy

import "sync"

// coalescer merges concurrent fetches of the same variant: the first caller
// (the leader) starts a fill, later callers join it. Unlike singleflight, a
// fill's result may turn out not shareable (a response the cache could not
// have served to the waiter from the store), and waiters then fetch for
// themselves; and a fill stays joinable until its body is complete and
// stored, so a request arriving mid-body reads along instead of fetching.
type coalescer struct {
	mu     sync.Mutex
	fills  map[string]*fill
	purges *purgeLog // the handler's
}

func newCoalescer(purges *purgeLog) *coalescer {
	return &coalescer{fills: make(map[string]*fill), purges: purges}
}

// join returns (f, true) if the caller became the leader for key, who must
// call done; otherwise the fill under way for key (a caller that only
// wants to lead, like a background refresh, ignores it). purges is the
// handler's purge count when the caller looked the store up (miss.purgesAt):
// a fill started before a later purge that names its page is not joined
// (it may carry what was purged), and a new one, which starts from
// purges, replaces it; a fill started after it is (what it brings is
// newer than the caller's lookup), and so is one that only purges of other
// pages came after. A fill led here stands at w in the wait order
// (waitorder.go).
func (c *coalescer) join(key string, purges uint64, w fillWait) (*fill, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if f, ok := c.fills[key]; ok && !c.purges.touched(f.purges, purges, key, f.header()) {
		return f, false
	}
	f := newFill(purges, w)
	c.fills[key] = f
	return f, true
}

// done removes the leader's fill: later requests look in the store again.
func (c *coalescer) done(key string, f *fill) {
	c.mu.Lock()
	if c.fills[key] == f {
		delete(c.fills, key)
	}
	c.mu.Unlock()
}
