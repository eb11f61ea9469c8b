package proxy

import (
	"hash/maphash"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/edgecache/edge/disk"
	"github.com/edgecache/edge/rules"
	"github.com/hashicorp/golang-lru/v2/simplelru"
)

// Store is an in-memory response store bounded in bytes. golang-lru counts
// entries, not bytes, so the store keeps a byte total and evicts the least
// recently used URL until it is back under budget. Each URL holds the
// variants selected by its Vary field (at most MaxVariants).
type Store struct {
	mu          sync.Mutex
	lru         *simplelru.LRU[string, *object]
	bytes       int64                          // bytes of all stored entries
	budget      int64                          // the byte budget
	maxVariants int                            // variants kept per URL
	tags        map[string]map[string]struct{} // surrogate key → URL keys
	under       map[string]map[string]int      // keys extended after a NUL (slices), by the key before it, counting variants (KeysUnder)
	stats       StoreStats
	onInsert    func(key string)
	onDrop      func(e *Entry)   // called under the lock for every entry that leaves
	onRemove    func(key string) // likewise, with its key (the cluster's indicator: the store changed)

	disk     *disk.Tier                                 // the second tier, or nil (tiers.go)
	tierOpts TierOptions                                // how the store uses it
	revive   func(*disk.Record, *rules.Lifetime) *Entry // rebuilds an entry read from disk (the handler's)
	promoted atomic.Uint64                              // disk hits copied into RAM

	seed         maphash.Seed
	changeCounts [changeBuckets]atomic.Uint64 // per key bucket (tiers.go)
}

// OnDrop registers f to be called (under the store's lock, so it must not
// call back into the store) for every entry that leaves the store:
// evicted, replaced or removed.
func (s *Store) OnDrop(f func(e *Entry)) { s.onDrop = f }

// OnRemove registers f to be called, under the store's lock, with the key
// of every entry that leaves the RAM tier (evicted, purged, replaced), and
// under the disk tier's lock with the key of every variant that leaves the
// disk tier (AttachDisk): f must neither block nor call into the store.
// Call it before serving.
func (s *Store) OnRemove(f func(key string)) { s.onRemove = f }

// OnInsert registers f to be called (outside the store's lock) whenever a
// URL key enters the store; the cluster feeds its indicator with it.
func (s *Store) OnInsert(f func(key string)) { s.onInsert = f }

// OnRevive registers f to rebuild an entry from a disk record (freshness,
// codings and size come from the current policy).
func (s *Store) OnRevive(f func(*disk.Record, *rules.Lifetime) *Entry) { s.revive = f }

// StoreStats are the store's running counters.
type StoreStats struct {
	Bytes     int64  // bytes currently stored
	Objects   int64  // entries (variants) currently stored
	Evictions uint64 // entries evicted to stay under the byte budget
}

// object is the LRU value for one URL: its current Vary names and variants.
type object struct {
	vary     []string
	variants []*Entry
}

// NewStore returns a store holding at most budget bytes and maxVariants
// variants per URL.
func NewStore(budget int64, maxVariants int) *Store {
	s := &Store{budget: budget, maxVariants: maxVariants, tags: make(map[string]map[string]struct{}), under: make(map[string]map[string]int), seed: maphash.MakeSeed()}
	// The entry-count limit is effectively unbounded: bytes are the budget.
	l, err := simplelru.NewLRU[string, *object](1<<31-1, s.evicted)
	if err != nil {
		panic(err) // only for a non-positive size
	}
	s.lru = l
	return s
}

// evicted runs under s.mu whenever the LRU drops an object.
func (s *Store) evicted(key string, o *object) {
	for _, e := range o.variants {
		s.dropEntry(e)
	}
}

func (s *Store) dropEntry(e *Entry) {
	if s.onDrop != nil {
		s.onDrop(e)
	}
	if s.onRemove != nil {
		s.onRemove(e.Key)
	}
	if base, _, ok := strings.Cut(e.Key, "\x00"); ok {
		if m := s.under[base]; m != nil {
			if m[e.Key]--; m[e.Key] <= 0 {
				delete(m, e.Key)
			}
			if len(m) == 0 {
				delete(s.under, base)
			}
		}
	}
	s.bytes -= e.charged
	e.inStore = false
	s.stats.Objects--
	for _, t := range e.surrogates {
		if m := s.tags[t]; m != nil {
			delete(m, e.Key)
			if len(m) == 0 {
				delete(s.tags, t)
			}
		}
	}
}

func (s *Store) addEntry(e *Entry) {
	e.charged = e.size + e.formBytes.Load()
	e.inStore = true
	s.bytes += e.charged
	s.stats.Objects++
	if base, _, ok := strings.Cut(e.Key, "\x00"); ok {
		m := s.under[base]
		if m == nil {
			m = make(map[string]int)
			s.under[base] = m
		}
		m[e.Key]++
	}
	for _, t := range e.surrogates {
		m := s.tags[t]
		if m == nil {
			m = make(map[string]struct{})
			s.tags[t] = m
		}
		m[e.Key] = struct{}{}
	}
}

// Lookup returns the stored variant of key that req selects, or nil. It
// also returns the URL's current Vary names, which callers use to coalesce
// requests for the same variant.
func (s *Store) Lookup(key string, req http.Header) (*Entry, []string) {
	return s.LookupFunc(key, func(names []string) string { return VaryKey(names, req) }, nil, true)
}

// LookupFunc is Lookup with the request's variant key computed by varyKey
// for the URL's Vary names (none for a URL that does not vary). life, when
// not nil, is the cache rules' lifetime for a response of a status to the
// request: an entry read from disk is rebuilt under it, as its fill was
// (the record keeps the response, not the rule; without it a rule's ttl,
// max_ttl, default_ttl and stale windows were lost on every disk hit and
// on the promoted copy: a review's test). promote lets a disk hit be copied
// into RAM for everyone: only when life is the same for every request of
// the key (a cookie rule's lifetime, given to the copy, reached everyone:
// a review's test), and not for a look-up that is no read (a purge's).
func (s *Store) LookupFunc(key string, varyKey func(names []string) string, life func(status int) *rules.Lifetime, promote bool) (*Entry, []string) {
	s.mu.Lock()
	o, ok := s.lru.Get(key)
	if !ok {
		s.mu.Unlock()
		if s.disk != nil {
			var vary []string
			e := s.lookupDisk(key, func(names []string) string { vary = names; return varyKey(names) }, life, promote)
			return e, vary
		}
		return nil, nil
	}
	vary := o.vary
	if len(vary) == 0 {
		vary = nil
	}
	s.mu.Unlock()
	// Even without Vary the request's variant key is asked for: a request
	// carrying fields the cache keys (proxy.fieldKey) selects a variant of
	// its own.
	vk := varyKey(vary)
	s.mu.Lock()
	for _, e := range o.variants {
		if e.VaryKey == vk && slices.Equal(e.VaryNames, vary) {
			s.mu.Unlock()
			return e, vary
		}
	}
	s.mu.Unlock()
	if s.disk != nil {
		// RAM keeps at most MaxVariants per URL; the disk may have more.
		if e := s.lookupDisk(key, func([]string) string { return vk }, life, promote); e != nil && slices.Equal(e.VaryNames, vary) {
			return e, vary
		}
	}
	return nil, vary
}

// Put stores e, replacing the variant with the same Vary key. A response
// whose Vary names differ from the URL's current ones replaces all variants
// (the newest response defines how the URL varies). Put refuses an entry
// larger than the whole budget.
func (s *Store) Put(e *Entry) bool {
	ok, inserted := s.putQuiet(e)
	if inserted != nil {
		inserted()
	}
	return ok
}

// putQuiet is Put without telling the insert hook (the cluster's
// indicator, which may rebuild its filter from every key): it returns the
// call to make, or nil, so that a caller holding a lock makes it after.
func (s *Store) putQuiet(e *Entry) (ok bool, inserted func()) {
	if s.keyedSupersedes(e) {
		return false, nil
	}
	notify := func() {
		if s.onInsert != nil {
			s.onInsert(e.Key)
		}
	}
	// A variant made for a request's own keyed fields (proxy.fieldKey:
	// fields the cache does not know) is not written to disk: RAM keeps
	// few of them and never lets them displace what everyone is served,
	// and the disk, which keeps no cap per URL, let one client sending
	// junk field values evict every other URL from it (a review's test).
	if s.disk != nil && madeForKeyedFields(e.VaryKey) && e.size >= s.tierOpts.DiskOnlyBytes {
		return false, nil // too large for RAM to hold usefully, and not for the disk: its requester's alone
	}
	if s.disk != nil && !madeForKeyedFields(e.VaryKey) {
		s.disk.Write(record(e))
		if e.size >= s.tierOpts.DiskOnlyBytes {
			// Too large for RAM to hold usefully: disk only. What it
			// replaces in RAM must go, as a Put would replace it.
			s.dropSuperseded(e)
			return true, notify
		}
	}
	if e.size > s.budget {
		return false, nil
	}
	if s.put(e) {
		return true, notify
	}
	return true, nil
}

// put stores e under the lock and reports whether its URL key is new.
func (s *Store) put(e *Entry) (inserted bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.changes(e.Key).Add(1)
	return s.putLocked(e)
}

// putLocked is put under s.mu.
func (s *Store) putLocked(e *Entry) (inserted bool) {
	o, ok := s.lru.Get(e.Key)
	if !ok {
		o = &object{vary: e.VaryNames}
		s.lru.Add(e.Key, o)
		inserted = true
	} else if !slices.Equal(o.vary, e.VaryNames) {
		for _, old := range o.variants {
			s.dropEntry(old)
		}
		o.variants = o.variants[:0]
		o.vary = e.VaryNames
	}
	replaced := false
	for i, old := range o.variants {
		if old.VaryKey == e.VaryKey {
			s.dropEntry(old)
			o.variants[i] = e
			replaced = true
			break
		}
	}
	if !replaced {
		if len(o.variants) >= s.maxVariants {
			// Drop a variant to stay within the cap: the oldest one made
			// for a request with keyed fields (proxy.fieldKey) first, so
			// that requests with junk fields cannot push out the variants
			// everyone else is served; such a request never displaces one
			// of those.
			victim := slices.IndexFunc(o.variants, func(v *Entry) bool { return madeForKeyedFields(v.VaryKey) })
			if victim < 0 {
				if madeForKeyedFields(e.VaryKey) {
					return inserted // not kept: served to its requester alone
				}
				victim = 0
			}
			s.dropEntry(o.variants[victim])
			o.variants = slices.Delete(o.variants, victim, victim+1)
		}
		o.variants = append(o.variants, e)
	}
	s.addEntry(e)
	s.evictToBudget()
	return inserted
}

// evictToBudget drops least recently used URLs until the store fits.
func (s *Store) evictToBudget() {
	n := 0
	for s.bytes > s.budget {
		_, o, ok := s.lru.RemoveOldest()
		if !ok {
			break
		}
		n += len(o.variants)
	}
	s.stats.Evictions += uint64(n)
}

// chargeForm charges n more bytes (a derived form about to be attached to
// e) to e if e is stored, evicting to stay within the budget, and reports
// whether it did. The form is attached (e.formBytes) only after a true.
// holds reports whether e is the store's (in RAM, not evicted).
func (s *Store) holds(e *Entry) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return e.inStore
}

func (s *Store) chargeForm(e *Entry, n int64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !e.inStore {
		// Not stored (a disk hit's entry, a q-rule or unshareable answer,
		// an evicted one): the store charges nothing for it, so the form
		// stays on the caller's budget.
		return false
	}
	e.charged += n
	s.bytes += n
	s.evictToBudget()
	return true
}

// dropSuperseded removes from RAM what e replaces: every variant of its
// URL if its Vary names differ, else the variant it selects.
func (s *Store) dropSuperseded(e *Entry) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.changes(e.Key).Add(1)
	o, ok := s.lru.Peek(e.Key)
	if !ok {
		return
	}
	if !slices.Equal(o.vary, e.VaryNames) {
		s.lru.Remove(e.Key)
		return
	}
	s.dropVariantLocked(e.Key, o, e.VaryKey)
}

// dropVariantLocked drops the variant of key's object o whose Vary key is
// varyKey, and the object once it holds none; it reports whether it found
// one. Under s.mu.
func (s *Store) dropVariantLocked(key string, o *object, varyKey string) bool {
	found := false
	for i, v := range o.variants {
		if v.VaryKey == varyKey {
			s.dropEntry(v)
			o.variants = slices.Delete(o.variants, i, i+1)
			found = true
			break
		}
	}
	if len(o.variants) == 0 {
		s.lru.Remove(key)
	}
	return found
}

// Remove deletes every variant of key, from both tiers, and reports how
// many were removed (from the tier that held more).
func (s *Store) Remove(key string) int {
	// First: a disk read under way must not promote what is removed.
	s.changes(key).Add(1)
	n := 0
	if s.disk != nil {
		n = s.disk.Remove(key)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.changes(key).Add(1)
	o, ok := s.lru.Peek(key)
	if !ok {
		return n
	}
	s.lru.Remove(key)
	return max(n, len(o.variants))
}

// RemoveVariantUnlessReplaced is RemoveVariant for an entry stored by a
// fill that a purge overtook: unless the RAM tier now holds another entry
// for e's variant (a Put after e's, which replaced e on the disk tier
// too: its Write drops e's queued write even when it is dropped itself,
// disk.Tier.supersede), e's variant goes from both tiers. A Put that comes between the
// check and the removal loses its entry: a miss more, never a purged
// answer.
func (s *Store) RemoveVariantUnlessReplaced(e *Entry) int {
	s.mu.Lock()
	if o, ok := s.lru.Peek(e.Key); ok {
		for _, v := range o.variants {
			if v.VaryKey == e.VaryKey && v != e {
				s.mu.Unlock()
				return 0
			}
		}
	}
	s.mu.Unlock()
	return s.RemoveVariant(e)
}

// RemoveVariant deletes e's variant of its URL (the one with e's Vary
// key), from both tiers, and reports how many stored responses it
// removed. The URL's other variants stay.
func (s *Store) RemoveVariant(e *Entry) int {
	s.changes(e.Key).Add(1)
	n := 0
	if s.disk != nil {
		n = s.disk.RemoveVariant(e.Key, e.VaryKey)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.changes(e.Key).Add(1)
	if o, ok := s.lru.Peek(e.Key); ok && s.dropVariantLocked(e.Key, o, e.VaryKey) {
		n = max(n, 1)
	}
	return n
}

// keyedSupersedes reports whether e, made for a request with keyed fields,
// would redefine how its URL varies and so drop the variants everyone else
// is served: such an entry is not kept (it is served to its requester).
func (s *Store) keyedSupersedes(e *Entry) bool {
	if !madeForKeyedFields(e.VaryKey) {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	o, ok := s.lru.Peek(e.Key)
	if !ok || slices.Equal(o.vary, e.VaryNames) {
		return false
	}
	return slices.ContainsFunc(o.variants, func(v *Entry) bool { return !madeForKeyedFields(v.VaryKey) })
}

// MarkStale soft-purges every variant of key, in both tiers, and reports
// how many (from the tier that held more).
func (s *Store) MarkStale(key string) int {
	s.changes(key).Add(1) // first, as in Remove
	n := 0
	if s.disk != nil {
		n = s.disk.MarkStale(key)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.changes(key).Add(1)
	o, ok := s.lru.Peek(key)
	if !ok {
		return n
	}
	for _, e := range o.variants {
		e.MarkStale()
	}
	return max(n, len(o.variants))
}

// Keys returns the URL keys that match a predicate. It holds the lock while
// it scans, so it is meant for admin operations, not the data path.
func (s *Store) Keys(match func(string) bool) []string {
	s.mu.Lock()
	var out []string
	for _, k := range s.lru.Keys() {
		if match(k) {
			out = append(out, k)
		}
	}
	s.mu.Unlock()
	if s.disk != nil {
		out = union(out, s.disk.Keys(match))
	}
	return out
}

// union appends to a the members of b not in a.
func union(a, b []string) []string {
	if len(b) == 0 {
		return a
	}
	seen := make(map[string]struct{}, len(a))
	for _, k := range a {
		seen[k] = struct{}{}
	}
	for _, k := range b {
		if _, ok := seen[k]; !ok {
			a = append(a, k)
		}
	}
	return a
}

// KeysWithPrefix returns the URL keys starting with prefix.
func (s *Store) KeysWithPrefix(prefix string) []string {
	return s.Keys(func(k string) bool { return strings.HasPrefix(k, prefix) })
}

// KeysUnder returns the keys extended from base after a NUL (a sliced
// object's slices), in RAM or on disk: a purge of the object removes them
// even when its manifest, which names them, is gone (a review's
// TestAURLPurgeRemovesTheSlicesOfAnEvictedManifest: the manifest, read
// before its slices, is evicted first).
func (s *Store) KeysUnder(base string) []string {
	s.mu.Lock()
	out := slices.Collect(maps.Keys(s.under[base]))
	s.mu.Unlock()
	if s.disk != nil {
		out = union(out, s.disk.KeysUnder(base))
	}
	return out
}

// KeysWithTag returns the URL keys of entries carrying a surrogate key.
func (s *Store) KeysWithTag(tag string) []string {
	s.mu.Lock()
	out := slices.Collect(maps.Keys(s.tags[tag]))
	s.mu.Unlock()
	if s.disk != nil {
		out = union(out, s.disk.KeysWithTag(tag))
	}
	return out
}

// Stats returns a snapshot of the store's counters.
func (s *Store) Stats() StoreStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.stats
	st.Bytes = s.bytes
	return st
}

// Budget returns the store's byte budget.
func (s *Store) Budget() int64 { return s.budget }
