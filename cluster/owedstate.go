package cluster

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/edgecache/edge/proxy"
)

// What peers are owed outlives a restart of the node that owes it when
// cluster.state_dir is set: the lists are written to owedFile there,
// whole, after every change that matters (a purge owed, settled,
// collapsed, expired; a peer forgotten or back), and read back when the
// node starts. Otherwise a rolling restart during an outage (every node
// that owed a peer the purge restarted before the peer came back) lost
// the purge, and the peer served the purged pages from its disk tier.
//
// The file is small (at most owedPerPeer purges for each of the peers in
// the table and owedTracked forgotten ids) and changes only when purges
// go round, so it is rewritten whole: a temporary file, fsync, rename,
// fsync of the directory; a crash leaves the old file or the new one,
// never a torn one. Hand-written: one JSON document written atomically
// needs no storage library. A file that does not parse, or names a purge
// that is not one, stops the node's start with its name and the reason
// (move it aside to start without it): dropping it silently would lose
// the purges it holds.

// owedFile is the state file's name in cluster.state_dir.
const owedFile = "owed-purges.json"

// owedState is the file's document.
type owedState struct {
	Version int                      `json:"version"`
	Peers   map[string]owedStateList `json:"peers"`
}

type owedStateList struct {
	// Forgotten is when the peer was forgotten (zero: it was in the
	// table; at load every list counts as forgotten now until its peer
	// is in the table again, so that an id that never comes back
	// expires).
	Forgotten time.Time        `json:"forgotten,omitzero"`
	PIDs      []string         `json:"pids,omitempty"`
	Purges    []owedStatePurge `json:"purges"`
}

type owedStatePurge struct {
	URL    string    `json:"url,omitempty"`
	Prefix string    `json:"prefix,omitempty"`
	Tag    string    `json:"tag,omitempty"`
	Soft   bool      `json:"soft,omitempty"`
	PID    string    `json:"pid"`
	Away   []string  `json:"away,omitempty"`
	Covers time.Time `json:"covers,omitzero"`
	// Stands is null when the purges a purge of everything stands for
	// are not all known, [] when it stands for none (owedPurge.stands).
	Stands []string `json:"stands"`
}

// encodeLocked is the document for what o holds. o.mu must be held.
func (o *owedPurges) encodeLocked() []byte {
	st := owedState{Version: 1, Peers: map[string]owedStateList{}}
	for id, l := range o.byPeer {
		sl := owedStateList{Forgotten: l.forgotten, Purges: []owedStatePurge{}}
		for pid := range l.pids {
			sl.PIDs = append(sl.PIDs, pid)
		}
		slices.Sort(sl.PIDs)
		for _, x := range l.purges {
			sl.Purges = append(sl.Purges, owedStatePurge{URL: x.p.URL, Prefix: x.p.Prefix, Tag: x.p.Tag, Soft: x.p.Soft,
				PID: x.pid, Away: x.away, Covers: x.covers, Stands: x.stands})
		}
		st.Peers[id] = sl
	}
	b, _ := json.Marshal(st) // plain strings, times and slices: cannot fail
	return b
}

// decodeOwed reads a state file's document into lists owed per peer id,
// each checked: a peer id, a purge that names something, an id as
// newPurgeID or everythingID makes, bounded lengths. now stands for the
// time a list's peer was forgotten where the file says it was in the
// table.
func decodeOwed(b []byte, now time.Time) (map[string]*owedList, error) {
	var st owedState
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&st); err != nil {
		return nil, fmt.Errorf("not an owed-purges document: %w", err)
	}
	if dec.More() {
		return nil, errors.New("not an owed-purges document: data after it")
	}
	if st.Version != 1 {
		return nil, fmt.Errorf("version %d, want 1", st.Version)
	}
	if len(st.Peers) > 4*owedTracked+4096 {
		return nil, fmt.Errorf("%d peer ids: more than any node tracks", len(st.Peers))
	}
	out := make(map[string]*owedList, len(st.Peers))
	for id, sl := range st.Peers {
		if id == "" || len(id) > 256 {
			return nil, fmt.Errorf("peer id %q: want 1 to 256 bytes", id)
		}
		if len(sl.Purges) > owedPerPeer {
			return nil, fmt.Errorf("peer %q: %d purges owed, at most %d are kept", id, len(sl.Purges), owedPerPeer)
		}
		if len(sl.PIDs) > 4*owedPerPeer {
			return nil, fmt.Errorf("peer %q: %d purge ids, at most %d are kept", id, len(sl.PIDs), 4*owedPerPeer)
		}
		l := &owedList{forgotten: sl.Forgotten}
		if l.forgotten.IsZero() {
			l.forgotten = now
		}
		for _, pid := range sl.PIDs {
			if !purgeIDLike(pid) {
				return nil, fmt.Errorf("peer %q: purge id %q: want hex of 24 characters", id, pid)
			}
			if l.pids == nil {
				l.pids = map[string]struct{}{}
			}
			l.pids[pid] = struct{}{}
		}
		for i, sp := range sl.Purges {
			p := proxy.PurgeRequest{URL: sp.URL, Prefix: sp.Prefix, Tag: sp.Tag, Soft: sp.Soft}
			if err := p.Validate(); err != nil {
				return nil, fmt.Errorf("peer %q: purge %d: %w", id, i, err)
			}
			if sp.PID != "" && !purgeIDLike(sp.PID) {
				// "" is a purge from a sender before purge ids (a
				// rolling upgrade: a review's
				// TestAPurgeWithoutAnIdIsOwedInAFileThatLoads).
				return nil, fmt.Errorf("peer %q: purge %d: id %q: want hex of 24 characters, or none", id, i, sp.PID)
			}
			if len(sp.Away) > sendersAwayMax || len(sp.Stands) > standsMax {
				return nil, fmt.Errorf("peer %q: purge %d: %d away and %d stood-for ids, at most %d and %d", id, i, len(sp.Away), len(sp.Stands), sendersAwayMax, standsMax)
			}
			if sp.Stands != nil && p != purgeEverything {
				return nil, fmt.Errorf("peer %q: purge %d: names the purges it stands for but is not a purge of everything", id, i)
			}
			for _, a := range sp.Away {
				if a == "" || len(a) > 256 {
					return nil, fmt.Errorf("peer %q: purge %d: away id %q: want 1 to 256 bytes", id, i, a)
				}
			}
			for _, s := range sp.Stands {
				if !purgeIDLike(s) {
					return nil, fmt.Errorf("peer %q: purge %d: stood-for id %q: want hex of 24 characters", id, i, s)
				}
			}
			l.purges = append(l.purges, owedPurge{p: p, pid: sp.PID, away: sp.Away, covers: sp.Covers, stands: sp.Stands})
		}
		out[id] = l
	}
	return out, nil
}

// purgeIDLike reports whether s is a purge id as newPurgeID and
// everythingID make them: 12 bytes in hex.
func purgeIDLike(s string) bool {
	if len(s) != 24 {
		return false
	}
	_, err := hex.DecodeString(s)
	return err == nil
}

// loadOwed reads dir's state file, if there is one, into o (empty), and
// makes o write it on every change from now on.
func (o *owedPurges) loadOwed(dir string, now time.Time) (err error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("cluster.state_dir: %w", err)
	}
	if err := o.lockDir(dir); err != nil {
		return err
	}
	defer func() {
		if err != nil {
			_ = o.closeState() // the start stops: another may take the directory
		}
	}()
	path := filepath.Join(dir, owedFile)
	// Temporary files a crash left mid-write (the file itself is whole:
	// the old one or the new).
	if left, err := filepath.Glob(filepath.Join(dir, "."+owedFile+".*")); err == nil {
		for _, f := range left {
			_ = os.Remove(f)
		}
	}
	b, err := os.ReadFile(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		b = nil
	case err != nil:
		return fmt.Errorf("cluster.state_dir: %w", err)
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	o.path = path
	if b == nil {
		// Written now, so that a directory this node cannot write stops
		// the start rather than the first purge's record.
		empty := o.encodeLocked()
		if err := writeFileAtomic(path, empty); err != nil {
			return fmt.Errorf("cluster.state_dir: %w", err)
		}
		o.saved = empty
		return nil
	}
	lists, err := decodeOwed(b, now)
	if err != nil {
		return fmt.Errorf("cluster.state_dir: %s: %w (move it aside to start without the purges it owes)", path, err)
	}
	o.byPeer = lists
	o.saved = b
	n := 0
	for _, l := range lists {
		for i := range l.purges {
			o.seq++
			l.purges[i].seq = o.seq
		}
		n += len(l.purges)
	}
	o.addTotal(n)
	return nil
}

// lockDir takes an exclusive lock on dir for as long as o is open, so that
// a second process given the same directory stops at its start instead of
// each overwriting the other's record of what is owed (the disk tier locks
// its directory the same way). The lock is the kernel's: a crashed
// process holds nothing.
func (o *owedPurges) lockDir(dir string) error {
	f, err := os.OpenFile(filepath.Join(dir, "lock"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("cluster.state_dir: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		_ = f.Close()
		return fmt.Errorf("cluster.state_dir: %s is in use (%w): another process holds it, or a node of this one was not stopped; give each node its own directory", dir, err)
	}
	o.saveMu.Lock()
	o.lock = f
	o.saveMu.Unlock()
	return nil
}

// closeState writes what is not written yet and lets the directory go:
// nothing is written after it (a later change stays in memory).
func (o *owedPurges) closeState() error {
	o.saveMu.Lock()
	defer o.saveMu.Unlock()
	err := o.flushLocked()
	o.mu.Lock()
	if o.path != "" {
		o.closed = true // a purge owed from now on is reported unwritten (flush)
		// And one owed while the write above ran, or that it failed to
		// write, is not in the file either (a review's
		// TestReviewFinalAnOweDuringClosesLastWriteIsNotReportedSaved).
		o.owedAfterClose = o.owedAfterClose || o.dirty
	}
	o.path, o.dirty = "", false
	o.mu.Unlock()
	if o.lock != nil {
		_ = o.lock.Close() // closing releases the flock
		o.lock = nil
	}
	return err
}

// changedLocked marks what o holds as not yet written. o.mu must be held.
func (o *owedPurges) changedLocked() {
	if o.path != "" {
		o.dirty = true
	}
}

// errStateClosed is a purge owed after closeState: the
// node is stopping, and the change lives in its memory only.
var errStateClosed = errors.New("cluster.state_dir is closed (the node is stopping): what is owed now is in memory only")

// flush writes the state file if what o holds changed since it was last
// written, and reports the error if that failed (kept dirty: tried again
// at the next flush). A flush already writing makes this one a no-op
// when wait is false.
func (o *owedPurges) flush(wait bool) error {
	if wait {
		o.saveMu.Lock()
	} else if !o.saveMu.TryLock() {
		return nil
	}
	defer o.saveMu.Unlock()
	return o.flushLocked()
}

// flushLocked is flush with o.saveMu held.
func (o *owedPurges) flushLocked() error {
	o.mu.Lock()
	if o.owedAfterClose {
		o.mu.Unlock()
		return errStateClosed
	}
	if !o.dirty {
		o.mu.Unlock()
		return nil
	}
	o.dirty = false
	b, path := o.encodeLocked(), o.path
	o.mu.Unlock()
	if bytes.Equal(b, o.saved) {
		return nil
	}
	if err := writeFileAtomic(path, b); err != nil {
		o.mu.Lock()
		o.dirty = true
		o.mu.Unlock()
		return err
	}
	o.saved = b
	return nil
}

// needsFlush reports whether a change is waiting to be written.
func (o *owedPurges) needsFlush() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.dirty
}

// writeFileAtomic replaces path with b: a crash leaves the old file or the
// new one whole.
func writeFileAtomic(path string, b []byte) error {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("cluster: writing %s: %w", path, err)
	}
	tmp := f.Name()
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("cluster: writing %s: %w", path, err)
	}
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("cluster: writing %s: %w", path, err)
	}
	err = d.Sync()
	_ = d.Close() // read-only: the sync's error is the one to report
	if err != nil {
		return fmt.Errorf("cluster: writing %s: %w", path, err)
	}
	return nil
}

// Close waits for the purges under way here (within closeWait), writes
// what is owed and not yet written, and releases cluster.state_dir for the
// next process. Call it once the node takes no more purges: a change
// made later lives in memory only, and a purge that makes one reports it
// unwritten (FanOut.NotSaved), so its client is not told it was saved.
func (c *Cluster) Close() error {
	if !c.rounds.wait(closeWait(c.cfg.PeerTimeout)) {
		c.log.Warn("stopping with a purge still under way: what it owes may be in memory only, and its answer says so")
	}
	c.endLife()
	if err := c.owed.closeState(); err != nil {
		return fmt.Errorf("cluster: %w", err)
	}
	return nil
}

// OwedState is the state file purges owed to peers are kept in ("": memory
// only) and how many writes of it failed.
func (c *Cluster) OwedState() (path string, saveErrors uint64) {
	c.owed.mu.Lock()
	path = c.owed.path
	c.owed.mu.Unlock()
	return path, c.owed.saveErrors.Load()
}

// closeWait bounds Close's wait for the purges under way: a round ends
// within fanOutBound (its late answers settle what it owed, and a settled
// purge left in the file is only delivered again, answered at once).
func closeWait(peerTimeout time.Duration) time.Duration {
	return fanOutBound(peerTimeout) + time.Second
}

// roundGate counts the purges under way, for Close to wait on (a
// WaitGroup may not be added to while it is waited on).
type roundGate struct {
	mu   sync.Mutex
	n    int
	idle chan struct{} // closed when n falls to 0
}

// enter counts a purge under way and returns what ends it.
func (g *roundGate) enter() (leave func()) {
	g.mu.Lock()
	if g.n == 0 {
		g.idle = make(chan struct{})
	}
	g.n++
	g.mu.Unlock()
	return func() {
		g.mu.Lock()
		g.n--
		if g.n == 0 {
			close(g.idle)
		}
		g.mu.Unlock()
	}
}

// wait waits until no purge is under way, or bound has passed (false).
func (g *roundGate) wait(bound time.Duration) bool {
	g.mu.Lock()
	if g.n == 0 {
		g.mu.Unlock()
		return true
	}
	idle := g.idle
	g.mu.Unlock()
	t := time.NewTimer(bound)
	defer t.Stop()
	select {
	case <-idle:
		return true
	case <-t.C:
		return false
	}
}
