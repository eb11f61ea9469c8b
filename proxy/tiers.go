package proxy

import (
	"hash/maphash"
	"slices"
	"sync/atomic"

	"github.com/edgecache/edge/disk"
	"github.com/edgecache/edge/rules"
)

// The store's second tier. With a disk tier attached the store writes
// through: every response it keeps in RAM is also queued for the disk, so
// that a restart (or a crash, less what was still queued) keeps it, and RAM
// eviction costs nothing. Responses too large for RAM to hold usefully go
// to disk only. A lookup that misses RAM reads the disk; the entry is
// served from that read and promoted to RAM on its PromoteHits-th disk hit.

// TierOptions configure the disk tier's use by the store.
type TierOptions struct {
	// PromoteHits is the disk hit on which an object is copied into RAM
	// (1, the default: on every disk hit, which docs/storage.md measured
	// best: a disk hit is already an object's second request).
	PromoteHits int
	// DiskOnlyBytes: responses at least this large are kept on disk only
	// (0: a sixteenth of the RAM budget).
	DiskOnlyBytes int64
}

// AttachDisk makes t the store's second tier. Call it before serving.
func (s *Store) AttachDisk(t *disk.Tier, o TierOptions) {
	if o.PromoteHits <= 0 {
		o.PromoteHits = 1
	}
	if o.DiskOnlyBytes <= 0 {
		o.DiskOnlyBytes = max(s.budget/16, 1)
	}
	s.disk, s.tierOpts = t, o
	// A key only the disk tier held (RAM evicted it long ago) leaves the
	// store when the disk lets it go: the cluster's indicator, which
	// advertises disk keys too, must hear of it as of a RAM removal (it did
	// not: a purge or eviction of a disk-only page left peers a positive
	// until the next store). Read at call time: OnRemove may come later.
	t.OnRemove(func(key string) {
		if f := s.onRemove; f != nil {
			f(key)
		}
	})
}

// Promoted returns how many disk hits were copied into RAM.
func (s *Store) Promoted() uint64 { return s.promoted.Load() }

// diskRemoveFailures is the disk tier's count of files it could not
// remove or mark (0 without one).
func (s *Store) diskRemoveFailures() uint64 {
	if s.disk == nil {
		return 0
	}
	return s.disk.RemoveFailures()
}

// Disk returns the store's disk tier, or nil.
func (s *Store) Disk() *disk.Tier { return s.disk }

// record is the disk form of e: its stored fields, nothing derived.
func record(e *Entry) *disk.Record {
	return &disk.Record{
		Key: e.Key, VaryKey: e.VaryKey, VaryNames: e.VaryNames, Status: e.Status,
		Header: e.Header, Body: e.Body, RequestTime: e.RequestTime, ResponseTime: e.ResponseTime,
		Surrogates: e.surrogates, Stale: e.stale.Load(),
	}
}

// lookupDisk reads key's variant from the disk tier, promoting it to RAM
// on its PromoteHits-th disk hit.
func (s *Store) lookupDisk(key string, varyKey func(names []string) string, life func(status int) *rules.Lifetime, promote bool) *Entry {
	before := s.changes(key).Load()
	rec, hits := s.disk.Lookup(key, varyKey)
	if rec == nil || s.revive == nil {
		return nil
	}
	var lt *rules.Lifetime
	if life != nil {
		lt = life(rec.Status)
	}
	e := s.revive(rec, lt)
	if e == nil {
		return nil
	}
	e.fromDisk = true
	if promote && hits >= s.tierOpts.PromoteHits && e.size < s.tierOpts.DiskOnlyBytes {
		// The promoted entry is a second, independent entry: this
		// response's e is charged to the buffer budget by its writer,
		// the stored one to the store.
		s.promote(s.revive(rec, lt), before)
	}
	return e
}

// promote copies p, read from disk, into RAM, unless the key changed
// since the read began (a purge, a soft purge, a newer response: the
// read's bytes must not undo them) or RAM already holds the variant.
func (s *Store) promote(p *Entry, before uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if p == nil || s.changes(p.Key).Load() != before {
		return
	}
	if o, ok := s.lru.Peek(p.Key); ok {
		if !slices.Equal(o.vary, p.VaryNames) {
			return
		}
		for _, v := range o.variants {
			if v.VaryKey == p.VaryKey {
				return
			}
		}
	}
	s.promoted.Add(1)
	s.putLocked(p)
}

// changeBuckets spread the keys' change counters: a promotion compares
// its key's bucket before and after the disk read, so a change to another
// key in the bucket costs it a promotion, never correctness.
const changeBuckets = 1024

// changes is key's change counter, bumped under s.mu by every Put,
// Remove and MarkStale of the key.
func (s *Store) changes(key string) *atomic.Uint64 {
	return &s.changeCounts[maphash.String(s.seed, key)%changeBuckets]
}

// revive rebuilds an entry read from disk, deriving freshness, codings and
// size under the current policy and the rules' lifetime life (nil: none),
// as a fill does.
func (h *Handler) revive(r *disk.Record, life *rules.Lifetime) *Entry {
	// A record is held to the stored-copy rule a fill is (sharedHeader):
	// fields its lists name one user's are not served from it, whoever
	// wrote it (a record of the same key version from before that rule
	// held the first user's X-Account, safe then only because every use
	// was revalidated: a review's
	// TestS29NamedDiskRecordOfAnEarlierVersionIsServedFreshWithItsField).
	names, ok := namedFields(r.Header, h.policy().TargetedFields)
	if !ok || aboutTheRequestMessage(r.Status) && !ruleStores(life, r.Status) {
		// A copy that could not have been stored so, as the answer to a
		// request's form (a record written before that rule: a review
		// found one client's 400 revived for everyone): a miss.
		return nil
	}
	if _, has := r.Header[altSvc]; len(names) > 0 || has {
		r.Header = r.Header.Clone()
		deleteNamed(r.Header, names)
		delete(r.Header, altSvc) // the origin's, from a record written before it was stripped
	}
	e := &Entry{
		Key: r.Key, VaryKey: r.VaryKey, VaryNames: r.VaryNames, Status: r.Status,
		Header: r.Header, Body: r.Body, RequestTime: r.RequestTime, ResponseTime: r.ResponseTime, life: life,
	}
	h.classify(e)
	h.policy().finishEntry(e)
	if r.Stale {
		e.MarkStale()
	}
	return e
}
