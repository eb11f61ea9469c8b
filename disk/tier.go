// Package disk is the edge's second cache tier: stored responses on a local
// file system, bounded in bytes, kept across restarts and crashes.
//
// Each object (one variant of one URL) is one file, named by a hash of its
// key, written to a temporary file and renamed into place, with CRC-32C
// checksums of its metadata and body that are verified on every read. This
// is the layout of nginx's proxy_cache and Squid's ufs. It was chosen over
// bbolt, pebble and badger by measurement (docs/storage.md): it writes each
// byte about once (pebble wrote 3.9×), frees a deleted object's space at
// once (badger's value log held twice the live bytes), its reads do not
// inflate RSS (bbolt's mmap did), a crash can lose only objects not yet
// renamed, and the file system, not an engine, does the allocation. The
// part hand-written here is the index (an LRU of keys, rebuilt from the
// files' headers at startup) and the file format, which no engine offers
// for this shape.
//
// Writes are asynchronous (a bounded queue, one writer) and never fsync:
// a cache may lose an object on power loss, as long as it never serves a
// damaged one, and the checksums see to that. A tier that keeps failing
// (read-only, full, I/O errors) goes down: lookups and writes skip it until
// a probe write succeeds, and the proxy carries on from RAM.
package disk

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hashicorp/golang-lru/v2/simplelru"
)

// Options configure a tier.
type Options struct {
	Dir      string // the tier's directory (created if missing)
	MaxBytes int64  // bytes of files the tier may hold, never exceeded
	// QueueBytes bounds the bodies waiting to be written; a write that
	// would exceed it is dropped (the object stays in RAM only).
	QueueBytes int64
	// DownFor is how long a failing tier stays down before a write probes
	// it again.
	DownFor time.Duration
	Log     *slog.Logger
	FS      FS // nil: the operating system's
	// ObserveRead and ObserveWrite, if set, receive each read's and
	// write's duration (for the latency histograms).
	ObserveRead, ObserveWrite func(time.Duration)
	// KeyScheme names what the caller's keys mean (how it derives a URL
	// key and a variant key from a request). Records written under
	// another scheme are removed at Open and never returned: when a
	// release changes how requests map to keys, a record stored under the
	// old mapping may sit under a key that now selects it for requests it
	// was never meant for (a poisoned variant that outlived the fix of its
	// hole), so an upgrade starts the tier cold instead. "" matches
	// records written before schemes existed.
	KeyScheme string
}

// Defaults for the options left zero.
const (
	// DefaultQueueBytes lets a burst of fills (a flash crowd of new pages)
	// reach the disk without holding more than this in memory.
	DefaultQueueBytes = 32 << 20
	// DefaultDownFor is short enough that a disk that comes back (space
	// freed, remounted read-write) is used again within a minute.
	DefaultDownFor = 30 * time.Second
	// failuresToDown consecutive I/O errors of one kind (reads, or
	// writes) take the tier down: one error may be a single bad file,
	// three in a row is the disk. The kinds are counted apart: on a full
	// disk every write fails and every read succeeds, and a read that
	// reset the writes' count kept the tier up for good (a review's
	// TestS29DiskFullDiskWithReadsNeverGoesDown).
	failuresToDown = 3
	queueLen       = 4096
	// writers write files in parallel: a file creation waits on the file
	// system's journal far more than it uses the CPU, and parallel
	// creations share those waits (docs/storage.md measured the rates).
	writers = 4
)

// Stats are the tier's counters.
type Stats struct {
	Bytes, Budget, Objects              int64
	QueueBytes                          int64 // bodies waiting to be written
	Hits, Misses, Writes, Evictions     uint64
	Dropped                             uint64 // writes dropped: queue full, too large or tier down
	ReadErrors, WriteErrors, Corrupt    uint64
	RemovedOnWrite, Purged, StaleMarked uint64
	Up                                  bool
	LastError                           string
	LastErrorAt                         time.Time
	RecoveryObjects, RecoveryDiscarded  int64
	RecoveryTempFiles, RecoveryBytes    int64
	RecoveryRekeyed                     int64
	RecoverySeconds                     float64
	RecoveryFromSnapshot                bool
}

// Tier is the disk tier. Its methods are safe for concurrent use.
type Tier struct {
	opts Options
	fs   FS
	log  *slog.Logger
	root string // opts.Dir/v1

	mu      sync.Mutex
	lru     *simplelru.LRU[string, *object]
	bytes   int64 // bytes of committed files plus the write in progress
	objects int64 // variants in the index, kept as they come and go: Stats is read by every metric scrape
	tags    map[string]map[string]struct{}
	// under indexes keys extended after a NUL (a sliced object's slices)
	// by the key before it, counting their variants: a purge of the
	// object finds them even when its manifest is gone (KeysUnder).
	under   map[string]map[string]int
	pending map[string]map[string]*write // URL key → file name → queued write

	lockFile *os.File // flock held while open: one process per directory

	commitMu       sync.RWMutex // writers' commits (shared) against Remove (exclusive)
	removeMu       sync.Mutex   // one batch of removals at a time
	removerStopped bool         // under mu: Close stopped the remover

	gen         atomic.Uint64       // file generations (seeded with the start time: unique across runs)
	unlinks     []unlink            // dropped files awaiting removal (under mu)
	removing    []unlink            // the batch being removed (under mu)
	committing  map[string][]*write // writes linking their files, by URL key (under mu), replaced ones too
	unlinkBytes int64               // their bytes (under mu)
	unlinkWake  chan struct{}
	stopRemover chan struct{}
	removerDone chan struct{}

	queue  chan *write
	queued atomic.Int64
	done   chan struct{}
	// closeDone closes when Close's work is done (the snapshot written,
	// the lock let go), which a Close cut short leaves to its writers.
	closeDone chan struct{}
	// closeErr is what that work ended with (the snapshot's error), set
	// before closeDone closes: a later Close reports it too.
	closeErr error
	closed   atomic.Bool

	down       atomic.Bool
	downUntil  atomic.Int64 // unix nanoseconds
	readFails  atomic.Int32 // consecutive read errors
	writeFails atomic.Int32 // consecutive write errors

	hits, misses, writes, evictions, dropped atomic.Uint64
	readErrs, writeErrs, corrupt             atomic.Uint64
	removedOnWrite, purged, staleMarked      atomic.Uint64
	// removeFailures counts files that could not be removed or marked
	// stale (a disk gone read-only, an I/O error): a purge that made one
	// is reported incomplete (RemoveFailures), as its file may come back
	// at the next start's scan.
	removeFailures atomic.Uint64
	lastErr        atomic.Pointer[errorAt]
	recovery       Recovery

	// onRemove, when set, hears every key a stored file leaves the index
	// for (eviction, purge, replacement), under t.mu: the store passes it
	// on to the cluster, whose advertised indicator holds disk keys too.
	onRemove func(key string)
}

type errorAt struct {
	msg string
	at  time.Time
}

// object is one URL's entry in the index.
type object struct {
	vary     []string
	variants []*variant
}

// variant is one file.
type variant struct {
	varyKey    string
	name       string
	size       int64
	stale      bool
	hits       int
	surrogates []string
}

// write is a record waiting in the queue.
type write struct {
	rec   *Record
	name  string
	size  int64
	stale atomic.Bool // soft-purged while queued
	// committing is made (under t.mu) when the writer is about to link
	// the file, and closed once the write is indexed and, if soft-purged
	// meanwhile, marked: a soft purge of the key waits for it, and for no
	// other key's write.
	committing chan struct{}
}

// Recovery reports what startup found.
type Recovery struct {
	Objects   int64         // records indexed
	Bytes     int64         // their bytes
	Discarded int64         // files that were not whole records, removed
	TempFiles int64         // writes a crash interrupted, removed
	Rekeyed   int64         // records of another key scheme, removed
	Duration  time.Duration // time to rebuild the index
	// FromSnapshot: a clean shutdown's index was loaded; no file was
	// scanned (and none checked until read).
	FromSnapshot bool
}

// Open opens (or creates) the tier in opts.Dir and rebuilds its index from
// the files there, discarding partial and corrupt ones.
func Open(opts Options) (*Tier, error) {
	if opts.Dir == "" {
		return nil, errors.New("disk: no directory")
	}
	if opts.MaxBytes <= 0 {
		return nil, fmt.Errorf("disk: max bytes %d: must be positive", opts.MaxBytes)
	}
	if opts.QueueBytes <= 0 {
		opts.QueueBytes = DefaultQueueBytes
	}
	if opts.DownFor <= 0 {
		opts.DownFor = DefaultDownFor
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	t := &Tier{
		opts: opts, fs: opts.FS, log: opts.Log, root: filepath.Join(opts.Dir, "v1"),
		tags: make(map[string]map[string]struct{}), under: make(map[string]map[string]int), pending: make(map[string]map[string]*write),
		committing: make(map[string][]*write),
		queue:      make(chan *write, queueLen), done: make(chan struct{}), closeDone: make(chan struct{}),
		unlinkWake: make(chan struct{}, 1), stopRemover: make(chan struct{}), removerDone: make(chan struct{}),
	}
	t.gen.Store(uint64(time.Now().UnixNano()))
	if t.fs == nil {
		t.fs = osFS{tmp: filepath.Join(t.root, "tmp")}
	}
	lru, err := simplelru.NewLRU[string, *object](1<<31-1, t.evicted)
	if err != nil {
		return nil, fmt.Errorf("disk: %w", err)
	}
	t.lru = lru
	if err := os.MkdirAll(t.root, 0o700); err != nil {
		return nil, fmt.Errorf("disk: %w", err)
	}
	if err := t.lock(); err != nil {
		return nil, err
	}
	// The 256 directories objects are spread over (by the first byte of
	// their name), and tmp for file systems without O_TMPFILE.
	for _, d := range append(shardDirs(), "tmp") {
		if err := t.makeDir(filepath.Join(t.root, d), d != "tmp"); err != nil {
			t.unlock()
			return nil, fmt.Errorf("disk: %w", err)
		}
	}
	if err := t.recover(); err != nil {
		t.unlock()
		return nil, fmt.Errorf("disk: recovery of %s: %w", opts.Dir, err)
	}
	go t.remover()
	var wg sync.WaitGroup
	for range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			t.writer()
		}()
	}
	go func() {
		wg.Wait()
		close(t.done)
	}()
	return t, nil
}

// Recovery returns what startup found.
func (t *Tier) Recovery() Recovery { return t.recovery }

// fileName is the file holding one variant: a hash, so that any key is a
// safe, fixed-length name.
func fileName(key, varyKey string) string {
	sum := sha256.Sum256([]byte(key + "\x00" + varyKey))
	return hex.EncodeToString(sum[:16])
}

func (t *Tier) path(name string) string { return filepath.Join(t.root, name[:2], name) }

// Lookup returns the stored variant of key that varyKey selects (it is
// asked for every key, with the key's Vary names, none included), with the
// number of times it has been read from disk (for promotion), or nil. It
// returns nil, not an error, for a missing or corrupt file: the caller
// fetches from the origin, and the bad file is gone.
func (t *Tier) Lookup(key string, varyKey func(names []string) string) (*Record, int) {
	if t.down.Load() {
		t.misses.Add(1)
		return nil, 0
	}
	t.mu.Lock()
	o, ok := t.lru.Get(key)
	var v *variant
	vk := ""
	if ok {
		// Asked even without Vary: the caller's variant key may hold more
		// than Vary (the proxy keys fields it does not know). Pure and
		// cheap: fine under the lock.
		vk = varyKey(o.vary)
		for _, c := range o.variants {
			if c.varyKey == vk {
				v = c
				break
			}
		}
	}
	if v == nil {
		// A write still in the queue is served from memory, so that a
		// disk-only object is not fetched again before it lands.
		for _, w := range t.pending[key] {
			if varyKey(w.rec.VaryNames) == w.rec.VaryKey {
				r := *w.rec
				r.Stale = r.Stale || w.stale.Load()
				t.mu.Unlock()
				t.hits.Add(1)
				return &r, 0
			}
		}
		t.mu.Unlock()
		t.misses.Add(1)
		return nil, 0
	}
	v.hits++
	name, hits, stale := v.name, v.hits, v.stale
	t.mu.Unlock()

	start := time.Now()
	b, err := t.fs.ReadFile(t.path(name))
	if t.opts.ObserveRead != nil {
		t.opts.ObserveRead(time.Since(start))
	}
	var rec *Record
	if err == nil {
		rec, err = decode(b)
		if err == nil && (rec.Key != key || rec.VaryKey != vk) {
			// The keys (users' URLs, their tokens) go to the node's log
			// only: the error is the status page's last error, which the
			// admin listener shows without its token (a review's
			// TestS66DiskLastErrorShowsUsersPrivateURLsWithoutTheToken).
			t.log.Warn("disk tier: a file holds another key's record", "file", name, "holds", rec.Key, "want", key)
			err = fmt.Errorf("%w: file %s holds another key's record", ErrCorrupt, name)
		}
		if err == nil && rec.KeyScheme != t.opts.KeyScheme {
			// Never indexed (recovery removes such files), so a file
			// replaced behind the tier's back: not served either way.
			err = fmt.Errorf("%w: file %s has key scheme %q, not %q", ErrCorrupt, name, rec.KeyScheme, t.opts.KeyScheme)
		}
	}
	if err != nil {
		switch {
		case errors.Is(err, ErrCorrupt):
			t.corrupt.Add(1)
			t.noteError("read", err)
		case errors.Is(err, fs.ErrNotExist):
			// Replaced or evicted since the index was read: a miss.
		default:
			t.readErrs.Add(1)
			t.failed("read", err)
		}
		t.dropIfSame(key, v)
		t.misses.Add(1)
		return nil, 0
	}
	// The index's flag too: a soft purge whose write of the file's flag
	// failed still holds in this process (a review's test).
	rec.Stale = rec.Stale || stale
	t.hits.Add(1)
	t.readFails.Store(0)
	return rec, hits
}

// RemoveFailures is how many files the tier could not remove or mark
// stale since it opened (purges and evictions alike).
func (t *Tier) RemoveFailures() uint64 { return t.removeFailures.Load() }

// dropIfSame removes v from the index (and its file) if it is still the
// variant stored for key.
func (t *Tier) dropIfSame(key string, v *variant) {
	t.mu.Lock()
	defer t.mu.Unlock()
	o, ok := t.lru.Peek(key)
	if !ok {
		return
	}
	i := slices.Index(o.variants, v)
	if i < 0 {
		return
	}
	t.dropVariant(key, v)
	o.variants = slices.Delete(o.variants, i, i+1)
	if len(o.variants) == 0 {
		t.lru.Remove(key) // evicted finds no variants left
	}
}

// Write queues r to be stored, replacing the variant it replaces in the
// index at once (a different Vary replaces them all), so that nothing
// older is served once a newer response exists. It never blocks: when the
// queue is full or the tier is down the write is dropped and counted.
func (t *Tier) Write(r *Record) {
	w := &write{rec: r, name: fileName(r.Key, r.VaryKey)}
	w.size = int64(headerSize + len(r.Body) + 512) // estimate until encoded
	// All under the lock, which Close takes to close the queue: a write
	// racing a shutdown is dropped, never sent on a closed channel.
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed.Load() {
		return
	}
	// Nothing older may outlive a newer response, written or queued.
	t.supersede(r.Key, r.VaryKey, r.VaryNames)
	if w.size > t.opts.MaxBytes || (t.down.Load() && time.Now().UnixNano() < t.downUntil.Load()) {
		t.dropped.Add(1)
		return
	}
	if t.queued.Add(w.size) > t.opts.QueueBytes {
		t.queued.Add(-w.size)
		t.dropped.Add(1)
		return
	}
	select {
	case t.queue <- w: // never blocks: the queue has room or the write is dropped
	default:
		t.queued.Add(-w.size)
		t.dropped.Add(1)
		return
	}
	m := t.pending[r.Key]
	if m == nil {
		m = make(map[string]*write)
		t.pending[r.Key] = m
	}
	m[w.name] = w
}

// supersede drops from the index what a new response for (key, varyKey)
// with Vary names vary replaces. Under t.mu.
func (t *Tier) supersede(key, varyKey string, vary []string) {
	// Queued writes of the key with other Vary names, or of the same
	// variant, are older responses: they must not land after this one
	// (four writers do not keep order), queued or dropped (a full queue,
	// the tier down). The same variant's was replaced only when the new
	// write was queued, so one the queue dropped let the older land, and
	// with it a page from before a purge (a review's
	// TestS55DiskDroppedNewerWriteLetsTheOlderQueuedOneLand). A write of it
	// being committed finds itself replaced there (store) and is unlinked.
	name := fileName(key, varyKey)
	t.dropPending(key, func(w *write) bool { return w.name == name || !slices.Equal(w.rec.VaryNames, vary) })
	n := t.dropVariants(key, func(o *object, v *variant) bool { return v.varyKey == varyKey || !slices.Equal(o.vary, vary) })
	t.removedOnWrite.Add(uint64(n))
}

// dropPending drops the queued writes of key that drop selects: the
// writer finds them no longer current. Under t.mu.
func (t *Tier) dropPending(key string, drop func(*write) bool) {
	for name, w := range t.pending[key] {
		if drop(w) {
			delete(t.pending[key], name)
		}
	}
	if len(t.pending[key]) == 0 {
		delete(t.pending, key)
	}
}

// dropVariants drops the variants of key that drop selects, and the key
// once it has none. It reports how many it dropped. Under t.mu.
func (t *Tier) dropVariants(key string, drop func(*object, *variant) bool) int {
	o, ok := t.lru.Peek(key)
	if !ok {
		return 0
	}
	keep := o.variants[:0]
	n := 0
	for _, v := range o.variants {
		if drop(o, v) {
			t.dropVariant(key, v)
			n++
			continue
		}
		keep = append(keep, v)
	}
	clear(o.variants[len(keep):])
	o.variants = keep
	if len(keep) == 0 {
		t.lru.Remove(key)
	}
	return n
}

func (t *Tier) unpend(key string, w *write) {
	if m := t.pending[key]; m != nil && m[w.name] == w {
		delete(m, w.name)
		if len(m) == 0 {
			delete(t.pending, key)
		}
	}
}

// writer stores queued records one at a time (writers of them run).
func (t *Tier) writer() {
	for w := range t.queue {
		t.store(w)
		t.queued.Add(-w.size)
	}
}

func (t *Tier) store(w *write) {
	t.mu.Lock()
	current := t.pending[w.rec.Key][w.name] == w
	t.mu.Unlock()
	if !current {
		return // purged or replaced while queued
	}
	buf := encode(w.rec, t.opts.KeyScheme)
	size := int64(len(buf))
	// Metadata past what a read accepts (maxMeta: fields of megabytes,
	// which the origin client allows) would be written to be read as
	// corrupt every time (a review's
	// TestS55DiskRecordWithMetadataOverTheReadLimitIsWrittenThenReadAsCorrupt).
	tooMuchMeta := binary.BigEndian.Uint32(buf[8:]) > maxMeta
	if (t.down.Load() && time.Now().UnixNano() < t.downUntil.Load()) || size > t.opts.MaxBytes || tooMuchMeta {
		t.abandon(w)
		return
	}
	start := time.Now()
	// Reserve the bytes first, so that the files on disk never exceed
	// the budget even while this one is being written: evict, wait for
	// the evicted files to go, and give up if other writes in progress
	// still leave no room.
	t.mu.Lock()
	t.bytes += size
	t.evictToBudget()
	over := t.bytes > t.opts.MaxBytes
	t.mu.Unlock()
	if over {
		t.removeDropped()
		t.mu.Lock()
		over = t.bytes > t.opts.MaxBytes
		if over {
			t.bytes -= size
		}
		t.mu.Unlock()
		if over {
			t.abandon(w)
			return
		}
	}
	// Every file gets a name of its own (the key's hash and a generation),
	// so that committing and removing files need no lock: a removal can
	// never hit a newer file of the same key.
	fname := w.name + "." + strconv.FormatUint(t.gen.Add(1), 36)
	staged, err := t.fs.Stage(filepath.Dir(t.path(fname)), buf)
	// From here to the index update, Remove waits (commitMu), so that a
	// purge either finds the write pending (and the commit is abandoned)
	// or finds the file indexed (and removes it before returning).
	t.commitMu.RLock()
	defer t.commitMu.RUnlock()
	if err == nil {
		t.mu.Lock()
		current := t.pending[w.rec.Key][w.name] == w
		if current {
			w.committing = make(chan struct{})
			t.committing[w.rec.Key] = append(t.committing[w.rec.Key], w)
			// Run after t.mu is let go below (defers run last first): by
			// then the write is indexed and, if soft-purged, marked, or
			// replaced and its file queued for the remover.
			defer func() {
				t.mu.Lock()
				t.committing[w.rec.Key] = slices.DeleteFunc(t.committing[w.rec.Key], func(c *write) bool { return c == w })
				if len(t.committing[w.rec.Key]) == 0 {
					delete(t.committing, w.rec.Key)
				}
				t.mu.Unlock()
				close(w.committing)
			}()
		}
		t.mu.Unlock()
		if !current {
			staged.Abort() // purged or replaced while being written
			t.release(size)
			return
		}
		if w.stale.Load() && !w.rec.Stale {
			// Soft-purged while being written: the file lands marked, or
			// a crash between its link and SetStale below brought it back
			// fresh after the purge had returned (a review's
			// TestS29DiskSoftPurgeDuringCommitIsLostInACrash). A soft
			// purge from here on waits for w.committing, and the
			// SetStale below marks the file before that closes.
			staged.Abort()
			marked := *w.rec
			marked.Stale = true
			staged, err = t.fs.Stage(filepath.Dir(t.path(fname)), encode(&marked, t.opts.KeyScheme))
		}
	}
	if err == nil {
		if err = staged.Commit(t.path(fname)); err != nil {
			staged.Abort()
		}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if err == nil && t.pending[w.rec.Key][w.name] != w {
		// Replaced while being committed (a purge waits for us).
		t.unlinkLater(w.rec.Key, fname, size)
		return
	}
	t.unpend(w.rec.Key, w)
	if err != nil {
		// A commit may fail after the file was linked (a close after the
		// link): the name is this write's alone, so it goes, or a purge
		// would find nothing indexed to remove and a crash's scan would
		// serve the file (a review's
		// TestS55DiskCommitErrorAfterTheLinkLeavesAFileAPurgeCannotReach).
		if rerr := t.fs.Remove(t.path(fname)); rerr == nil || errors.Is(rerr, fs.ErrNotExist) {
			t.bytes -= size
		} else {
			t.unlinkLater(w.rec.Key, fname, size)
		}
		t.writeErrs.Add(1)
		t.failed("write", err)
		return
	}
	if t.opts.ObserveWrite != nil {
		t.opts.ObserveWrite(time.Since(start))
	}
	t.writes.Add(1)
	t.writeFails.Store(0)
	if t.down.CompareAndSwap(true, false) {
		// Back up: the reads' count starts again too, or one bad file
		// after a spell of read errors took the tier down again (a
		// review's TestS30DiskOneReadErrorAfterRecoveryTakesTheTierDown).
		t.readFails.Store(0)
		t.log.Info("disk tier is back up", "dir", t.opts.Dir)
	}
	v := &variant{varyKey: w.rec.VaryKey, name: fname, size: size, surrogates: w.rec.Surrogates}
	t.index(w.rec.Key, w.rec.VaryNames, v)
	if w.stale.Load() && !w.rec.Stale {
		v.stale = true
		_ = t.fs.SetStale(t.path(fname))
	}
}

// abandon drops a queued write that will not be made.
func (t *Tier) abandon(w *write) {
	t.mu.Lock()
	t.unpend(w.rec.Key, w)
	t.mu.Unlock()
	t.dropped.Add(1)
}

// release gives back bytes reserved for a write not made.
func (t *Tier) release(n int64) {
	t.mu.Lock()
	t.bytes -= n
	t.mu.Unlock()
}

// index adds v (whose bytes are already counted) under key. Under t.mu.
func (t *Tier) index(key string, vary []string, v *variant) {
	o, ok := t.lru.Get(key)
	if !ok {
		o = &object{vary: vary}
		t.lru.Add(key, o)
	} else if !slices.Equal(o.vary, vary) {
		for _, old := range o.variants {
			t.dropVariant(key, old)
		}
		o.variants, o.vary = o.variants[:0], vary
	}
	for i, old := range o.variants {
		if old.varyKey == v.varyKey {
			t.dropVariant(key, old)
			o.variants[i] = v
			t.tag(key, v)
			t.objects++
			return
		}
	}
	o.variants = append(o.variants, v)
	t.tag(key, v)
	t.objects++
}

func (t *Tier) tag(key string, v *variant) {
	if base, _, ok := strings.Cut(key, "\x00"); ok {
		m := t.under[base]
		if m == nil {
			m = make(map[string]int)
			t.under[base] = m
		}
		m[key]++
	}
	for _, s := range v.surrogates {
		m := t.tags[s]
		if m == nil {
			m = make(map[string]struct{})
			t.tags[s] = m
		}
		m[key] = struct{}{}
	}
}

func (t *Tier) untag(key string, v *variant) {
	if base, _, ok := strings.Cut(key, "\x00"); ok {
		if m := t.under[base]; m != nil {
			if m[key]--; m[key] <= 0 {
				delete(m, key)
			}
			if len(m) == 0 {
				delete(t.under, base)
			}
		}
	}
	for _, s := range v.surrogates {
		if m := t.tags[s]; m != nil {
			delete(m, key)
			if len(m) == 0 {
				delete(t.tags, s)
			}
		}
	}
}

// dropVariant forgets v; its file is removed by the remover, outside the
// lock (file names are unique, so the removal cannot hit a newer file).
// Under t.mu. Its bytes stay counted until the file is gone, so that the
// files on disk never exceed the budget.
func (t *Tier) dropVariant(key string, v *variant) {
	t.objects--
	t.untag(key, v)
	t.unlinkLater(key, v.name, v.size)
	if t.onRemove != nil {
		t.onRemove(key)
	}
}

// OnRemove registers f to hear, under the tier's lock, the key of every
// stored variant that leaves the index (evicted to the byte budget,
// purged, replaced, found damaged). f must not call back into the tier.
// Call it before serving.
func (t *Tier) OnRemove(f func(key string)) { t.onRemove = f }

// unlinkLater queues a file for the remover. Under t.mu.
func (t *Tier) unlinkLater(key, name string, size int64) {
	if t.removerStopped {
		// Closing: the remover is gone, so remove it now (nothing else
		// would, and the next start may trust a snapshot, not scan).
		if err := t.fs.Remove(t.path(name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			t.noteError("remove", err)
		}
		t.bytes -= size
		return
	}
	t.unlinks = append(t.unlinks, unlink{key: key, name: name, size: size})
	t.unlinkBytes += size
	select {
	case t.unlinkWake <- struct{}{}:
	default:
	}
}

type unlink struct {
	key  string // the URL key the file held (a soft purge marks it too)
	name string
	size int64 // bytes counted in t.bytes until removed
}

// remover removes dropped files until the tier closes.
func (t *Tier) remover() {
	for {
		select {
		case <-t.unlinkWake:
			t.removeDropped()
		case <-t.stopRemover:
			t.removeDropped()
			close(t.removerDone)
			return
		}
	}
}

// removeDropped removes the files queued so far.
func (t *Tier) removeDropped() {
	// One batch at a time: a caller that finds the queue empty because
	// the remover took it waits here until the remover's batch is gone.
	t.removeMu.Lock()
	defer t.removeMu.Unlock()
	t.mu.Lock()
	batch := t.unlinks
	t.unlinks = nil
	t.removing = batch
	t.mu.Unlock()
	defer func() {
		t.mu.Lock()
		t.removing = nil
		t.mu.Unlock()
	}()
	for _, u := range batch {
		if err := t.fs.Remove(t.path(u.name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			t.noteError("remove", err)
			t.removeFailures.Add(1)
		}
		t.mu.Lock()
		t.bytes -= u.size
		t.unlinkBytes -= u.size
		t.mu.Unlock()
	}
}

// evicted runs under t.mu when the LRU lets go of a URL.
func (t *Tier) evicted(key string, o *object) {
	for _, v := range o.variants {
		t.dropVariant(key, v)
	}
}

func (t *Tier) evictToBudget() {
	// Files already dropped and awaiting removal count against the
	// budget but evicting more would not hasten them.
	for t.bytes-t.unlinkBytes > t.opts.MaxBytes {
		_, o, ok := t.lru.RemoveOldest()
		if !ok {
			return
		}
		t.evictions.Add(uint64(len(o.variants)))
	}
}

// Remove deletes every variant of key, stored or queued, and reports how
// many were stored.
func (t *Tier) Remove(key string) int {
	// Wait for commits in progress: one of this key's must not link its
	// file after the purge has returned.
	t.commitMu.Lock()
	t.mu.Lock()
	t.invalidateSnapshot()
	delete(t.pending, key) // the writer finds its write no longer current
	n := 0
	if o, ok := t.lru.Peek(key); ok {
		n = len(o.variants)
		t.lru.Remove(key)
		t.purged.Add(uint64(n))
	}
	t.mu.Unlock()
	t.commitMu.Unlock()
	// A purged file is gone before Remove returns: a crash right after a
	// purge must not bring the object back at the next scan.
	t.removeDropped()
	return n
}

// RemoveVariant deletes the variant of key whose Vary key is varyKey,
// stored or queued, and reports how many were stored: a response that
// made one variant unusable removes that one, not the URL's others.
func (t *Tier) RemoveVariant(key, varyKey string) int {
	t.commitMu.Lock()
	t.mu.Lock()
	t.invalidateSnapshot()
	t.dropPending(key, func(w *write) bool { return w.rec.VaryKey == varyKey })
	n := t.dropVariants(key, func(_ *object, v *variant) bool { return v.varyKey == varyKey })
	t.purged.Add(uint64(n))
	t.mu.Unlock()
	t.commitMu.Unlock()
	t.removeDropped()
	return n
}

// MarkStale soft-purges every variant of key, stored or queued, and
// reports how many were stored.
func (t *Tier) MarkStale(key string) int {
	// A write of this key being committed is waited for (w.committing):
	// it either saw its flag before it linked its file (and linked it
	// marked) or marks it before it is done. Without the wait a file
	// linked unmarked outlived the purge in a crash; waiting for every
	// commit (commitMu) held a soft purge behind other keys' writes on a
	// slow disk while RAM still served the page fresh (a review's
	// TestS30DiskSoftPurgeOfAnUnrelatedKeyWaitsForASlowCommit).
	t.mu.Lock()
	t.invalidateSnapshot()
	for _, w := range t.pending[key] {
		w.stale.Store(true)
	}
	// Every write of the key linking its file, a replaced one too (its
	// file goes to the remover unmarked: a review's
	// TestS31DiskSoftPurgeMissesAReplacedWriteCommitting).
	var commits []chan struct{}
	for _, w := range t.committing[key] {
		w.stale.Store(true)
		commits = append(commits, w.committing)
	}
	var names []string
	if o, ok := t.lru.Peek(key); ok {
		for _, v := range o.variants {
			v.stale = true
			names = append(names, v.name)
		}
	}
	t.mu.Unlock()
	for _, c := range commits {
		<-c
	}
	// Files of the key the index let go (superseded, evicted, replaced
	// while linking) that the remover has not removed yet are marked too:
	// unmarked, a crash brought them back fresh at the next scan (a
	// review's TestS30DiskSoftPurgeMissesAFileAwaitingTheRemover). Marked,
	// not waited for: the remover may be slow, and a soft purge must not
	// wait on it.
	var dropped []string
	t.mu.Lock()
	for _, list := range [...][]unlink{t.unlinks, t.removing} {
		for _, u := range list {
			if u.key == key {
				dropped = append(dropped, u.name)
			}
		}
	}
	t.mu.Unlock()
	for _, name := range append(dropped, names...) {
		if err := t.fs.SetStale(t.path(name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			t.noteError("mark-stale", err)
			t.removeFailures.Add(1)
		}
	}
	t.staleMarked.Add(uint64(len(names)))
	return len(names)
}

// invalidateSnapshot removes the snapshot a Close wrote if the index
// changes after it (a purge during shutdown). Under t.mu.
func (t *Tier) invalidateSnapshot() {
	if t.closed.Load() {
		_ = os.Remove(t.snapshotPath())
	}
}

// Keys returns the URL keys that match a predicate, stored or queued
// (admin use: it holds the lock while it scans). A queued write is in
// neither the RAM store nor the index yet: a purge that did not see it
// let it land after the purge had returned (a review's test).
func (t *Tier) Keys(match func(string) bool) []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []string
	for _, k := range t.lru.Keys() {
		if match(k) {
			out = append(out, k)
		}
	}
	for k := range t.pending {
		if match(k) && !t.lru.Contains(k) {
			out = append(out, k)
		}
	}
	return out
}

// Has reports whether key has a variant on disk.
func (t *Tier) Has(key string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.lru.Contains(key)
}

// KeysUnder returns the keys extended from base after a NUL (a sliced
// object's slices), stored or queued.
func (t *Tier) KeysUnder(base string) []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]string, 0, len(t.under[base]))
	for k := range t.under[base] {
		out = append(out, k)
	}
	prefix := base + "\x00"
	for k := range t.pending {
		if _, indexed := t.under[base][k]; !indexed && strings.HasPrefix(k, prefix) {
			out = append(out, k)
		}
	}
	return out
}

// KeysWithTag returns the URL keys of records carrying a surrogate key,
// stored or queued (see Keys).
func (t *Tier) KeysWithTag(tag string) []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]string, 0, len(t.tags[tag]))
	for k := range t.tags[tag] {
		out = append(out, k)
	}
	for k, m := range t.pending {
		if _, indexed := t.tags[tag][k]; indexed {
			continue
		}
		for _, w := range m {
			if slices.Contains(w.rec.Surrogates, tag) {
				out = append(out, k)
				break
			}
		}
	}
	return out
}

// Stats returns a snapshot of the tier's counters.
func (t *Tier) Stats() Stats {
	t.mu.Lock()
	st := Stats{Bytes: t.bytes, Objects: t.objects}
	t.mu.Unlock()
	st.Budget = t.opts.MaxBytes
	st.Hits, st.Misses, st.Writes, st.Evictions = t.hits.Load(), t.misses.Load(), t.writes.Load(), t.evictions.Load()
	st.Dropped, st.ReadErrors, st.WriteErrors, st.Corrupt = t.dropped.Load(), t.readErrs.Load(), t.writeErrs.Load(), t.corrupt.Load()
	st.RemovedOnWrite, st.Purged, st.StaleMarked = t.removedOnWrite.Load(), t.purged.Load(), t.staleMarked.Load()
	st.Up = !t.down.Load()
	st.QueueBytes = t.queued.Load()
	st.RecoveryObjects, st.RecoveryDiscarded = t.recovery.Objects, t.recovery.Discarded
	st.RecoveryTempFiles, st.RecoveryBytes = t.recovery.TempFiles, t.recovery.Bytes
	st.RecoveryRekeyed = t.recovery.Rekeyed
	st.RecoverySeconds = t.recovery.Duration.Seconds()
	st.RecoveryFromSnapshot = t.recovery.FromSnapshot
	if e := t.lastErr.Load(); e != nil {
		st.LastError, st.LastErrorAt = e.msg, e.at
	}
	return st
}

// noteError records an error for the status page and logs it.
func (t *Tier) noteError(op string, err error) {
	t.lastErr.Store(&errorAt{msg: op + ": " + err.Error(), at: time.Now()})
	t.log.Warn("disk tier", "op", op, "err", err)
}

// failed counts an I/O error; enough in a row take the tier down.
func (t *Tier) failed(op string, err error) {
	t.noteError(op, err)
	fails := &t.readFails
	if op == "write" {
		fails = &t.writeFails
	}
	if fails.Add(1) >= failuresToDown {
		t.downUntil.Store(time.Now().Add(t.opts.DownFor).UnixNano())
		if t.down.CompareAndSwap(false, true) {
			t.log.Error("disk tier is down; serving from RAM only until a probe write succeeds", "dir", t.opts.Dir, "err", err, "retry_in", t.opts.DownFor)
		}
	}
}

// Flush waits until every write queued so far has been stored or dropped.
func (t *Tier) Flush(ctx context.Context) error {
	for {
		t.mu.Lock()
		n := len(t.pending)
		t.mu.Unlock()
		if n == 0 && t.queued.Load() == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("disk: flush: %w", ctx.Err())
		case <-time.After(time.Millisecond):
		}
	}
}

// Close stops accepting writes and waits (until ctx ends) for the queued
// ones to reach the disk, so that a graceful restart keeps them.
func (t *Tier) Close(ctx context.Context) error {
	t.mu.Lock()
	if t.closed.Swap(true) {
		t.mu.Unlock()
		// A Close cut short left the rest to its writers: this one waits
		// for it too, rather than say closed while the lock is held (a
		// review's TestS56DiskSecondCloseAfterACutShortOneReportsTheTierClosed).
		select {
		case <-t.closeDone:
			return t.closeErr
		case <-ctx.Done():
			return fmt.Errorf("disk: %d bytes of writes not flushed: %w", t.queued.Load(), ctx.Err())
		}
	}
	close(t.queue) // under mu: Write checks closed under it
	t.mu.Unlock()
	// With nothing left to write the context does not matter: a select of
	// both picked either when it was over too, and the directory kept its
	// lock with no snapshot (a review's
	// TestS55DiskCloseWithAnExpiredContextKeepsTheLockWithNothingToWrite).
	if t.queued.Load() == 0 {
		// Nothing queued nor being written: the writers end at once.
		<-t.done
		return t.finishClose()
	}
	select {
	case <-t.done:
		return t.finishClose()
	case <-ctx.Done():
		// The writers end on their own: the snapshot and the lock's
		// release follow them, for a process that goes on (a restart
		// inside it reopens the directory).
		go func() {
			<-t.done
			if err := t.finishClose(); err != nil {
				// Its Close has returned: the log, and any later Close,
				// are where this error can still be seen.
				t.log.Error("disk: closing after the writers ended", "err", err)
			}
		}()
		return fmt.Errorf("disk: %d bytes of writes not flushed: %w", t.queued.Load(), ctx.Err())
	}
}

// finishClose stops the remover, writes the index snapshot and lets the
// directory's lock go, once the writers are done.
func (t *Tier) finishClose() error {
	close(t.stopRemover)
	<-t.removerDone // the snapshot lists no file that is about to go
	t.mu.Lock()
	t.removerStopped = true
	err := t.writeSnapshot()
	t.mu.Unlock()
	t.unlock()
	if err != nil {
		t.closeErr = fmt.Errorf("disk: index snapshot: %w", err)
	}
	close(t.closeDone) // after closeErr: a Close that waits reads it
	return t.closeErr
}

// recover rebuilds the index from the files: temporary files are writes a
// crash interrupted; a file that is not a whole record (short, bad magic,
// bad metadata checksum, wrong name) is removed. Bodies are checked on
// read, so recovery reads only headers and metadata. Objects enter the LRU
// oldest first by modification time.
func (t *Tier) recover() error {
	start := time.Now()
	t.mu.Lock()
	fromSnapshot, err := t.loadSnapshot()
	t.mu.Unlock()
	if err != nil {
		return err
	}
	if fromSnapshot {
		t.mu.Lock()
		t.evictToBudget()
		t.recovery = Recovery{Objects: t.objects, Bytes: t.bytes, Duration: time.Since(start), FromSnapshot: true}
		t.mu.Unlock()
		return nil
	}
	tmps, err := os.ReadDir(filepath.Join(t.root, "tmp"))
	if err != nil {
		return err
	}
	for _, e := range tmps {
		_ = os.Remove(filepath.Join(t.root, "tmp", e.Name()))
		t.recovery.TempFiles++
	}
	dirs, err := os.ReadDir(t.root)
	if err != nil {
		return err
	}
	type found struct {
		rec   *Record
		name  string
		size  int64
		mtime int64
	}
	var (
		mu        sync.Mutex
		all       []found
		discarded atomic.Int64
		rekeyed   atomic.Int64
		wg        sync.WaitGroup
		work      = make(chan string)
	)
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for d := range work {
				ents, err := os.ReadDir(d)
				if err != nil {
					continue
				}
				for _, de := range ents {
					p := filepath.Join(d, de.Name())
					rec, size, mtime, err := readMeta(p)
					if err == nil && hashOf(de.Name()) != fileName(rec.Key, rec.VaryKey) {
						err = ErrCorrupt
					}
					if err != nil {
						_ = os.Remove(p)
						discarded.Add(1)
						continue
					}
					if rec.KeyScheme != t.opts.KeyScheme {
						_ = os.Remove(p)
						rekeyed.Add(1)
						continue
					}
					mu.Lock()
					all = append(all, found{rec: rec, name: de.Name(), size: size, mtime: mtime})
					mu.Unlock()
				}
			}
		}()
	}
	for _, d := range dirs {
		if d.IsDir() && len(d.Name()) == 2 {
			work <- filepath.Join(t.root, d.Name())
		}
	}
	close(work)
	wg.Wait()
	// Oldest first, so that of two files of one variant (a crash between
	// a write and the removal of what it replaced) the newer stays.
	sort.Slice(all, func(i, j int) bool {
		if all[i].mtime != all[j].mtime {
			return all[i].mtime < all[j].mtime
		}
		return genOf(all[i].name) < genOf(all[j].name)
	})
	t.mu.Lock()
	for _, f := range all {
		t.bytes += f.size
		t.index(f.rec.Key, f.rec.VaryNames, &variant{varyKey: f.rec.VaryKey, name: f.name, size: f.size, stale: f.rec.Stale, surrogates: f.rec.Surrogates})
	}
	t.evictToBudget() // the budget may have shrunk since the last run
	t.recovery = Recovery{Objects: t.objects, Bytes: t.bytes, Discarded: discarded.Load(), TempFiles: t.recovery.TempFiles, Rekeyed: rekeyed.Load(), Duration: time.Since(start)}
	t.mu.Unlock()
	return nil
}

// readMeta reads a file's header and metadata (not its body), checking the
// metadata's checksum and that the file is as long as the header says.
func readMeta(p string) (*Record, int64, int64, error) {
	f, err := os.Open(p)
	if err != nil {
		return nil, 0, 0, err
	}
	defer func() { _ = f.Close() }() // read only: nothing to lose
	fi, err := f.Stat()
	if err != nil {
		return nil, 0, 0, err
	}
	var hb [headerSize]byte
	if _, err := io.ReadFull(f, hb[:]); err != nil {
		return nil, 0, 0, fmt.Errorf("%w: short header", ErrCorrupt)
	}
	h, err := parseHeader(hb[:])
	if err != nil {
		return nil, 0, 0, err
	}
	if h.size() != fi.Size() {
		return nil, 0, 0, fmt.Errorf("%w: %d bytes, header says %d", ErrCorrupt, fi.Size(), h.size())
	}
	meta := make([]byte, h.metaLen)
	if _, err := io.ReadFull(f, meta); err != nil {
		return nil, 0, 0, fmt.Errorf("%w: short metadata", ErrCorrupt)
	}
	if crcOf(meta) != h.metaCRC {
		return nil, 0, 0, fmt.Errorf("%w: metadata checksum", ErrCorrupt)
	}
	rec, err := decodeMeta(meta)
	if err != nil {
		return nil, 0, 0, err
	}
	rec.Stale = h.stale
	return rec, fi.Size(), fi.ModTime().UnixNano(), nil
}

// lock takes an exclusive lock on the directory, so that two processes
// given the same path fail at startup instead of corrupting each other's
// index.
func (t *Tier) lock() error {
	f, err := os.OpenFile(filepath.Join(t.root, "lock"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("disk: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		_ = f.Close()
		return fmt.Errorf("disk: %s is in use by another process (%w); give each node its own directory", t.opts.Dir, err)
	}
	t.lockFile = f
	return nil
}

// makeDir makes one of the tier's own directories. Something else in its
// place (a file fsck or a stray copy left, a dangling link) is removed
// first: the name is the tier's, nothing it wrote is ever a file there,
// and refusing to open kept a restarted node from serving at all (a
// review's TestS29DiskADamagedTierDirectoryKeepsTheNodeFromStarting). A
// link to a directory is kept for a shard (an operator may spread shards
// over disks) but not for tmp, whose every file the start's scan deletes
// as an interrupted write: through a link it deleted files outside the
// tier (a review's TestS30DiskSymlinkedTmpLetsTheScanDeleteOutsideFiles).
// Called under the lock, so no other tier uses the directory.
func (t *Tier) makeDir(dir string, linkAllowed bool) error {
	if li, err := os.Lstat(dir); err == nil {
		keep := li.IsDir()
		if li.Mode()&os.ModeSymlink != 0 && linkAllowed {
			fi, err := os.Stat(dir)
			keep = err == nil && fi.IsDir()
		}
		if !keep {
			t.log.Warn("disk tier: something else where its directory should be; removed", "path", dir)
			if err := os.Remove(dir); err != nil {
				return err
			}
		}
	}
	return os.MkdirAll(dir, 0o700)
}

func (t *Tier) unlock() {
	if t.lockFile != nil {
		_ = t.lockFile.Close() // closing releases the flock
		t.lockFile = nil
	}
}

func shardDirs() []string {
	out := make([]string, 256)
	for i := range out {
		out[i] = hex.EncodeToString([]byte{byte(i)})
	}
	return out
}

// hashOf is the key-hash part of a file name ("hash.generation").
func hashOf(name string) string {
	h, _, _ := strings.Cut(name, ".")
	return h
}

// genOf is the generation part of a file name (0 if it has none).
func genOf(name string) uint64 {
	_, g, _ := strings.Cut(name, ".")
	n, _ := strconv.ParseUint(g, 36, 64)
	return n
}
