package disk

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"
)

// s29LinkGateFS lets the first commit link its file, then holds the writer
// right after the link (before the tier indexes it) until released: the
// moment a SIGKILL would find the disk as it is.
type s29LinkGateFS struct {
	osFS
	linked, release chan struct{}
	once            sync.Once
}

type s29LinkGateStaged struct {
	Staged
	fs *s29LinkGateFS
}

func (g s29LinkGateStaged) Commit(p string) error {
	err := g.Staged.Commit(p)
	g.fs.once.Do(func() { close(g.fs.linked); <-g.fs.release })
	return err
}

func (g *s29LinkGateFS) Stage(dir string, b []byte) (Staged, error) {
	s, err := g.osFS.Stage(dir, b)
	if err != nil {
		return nil, err
	}
	return s29LinkGateStaged{s, g}, nil
}

// A review found (now mended: MarkStale waits on commitMu and a write soft-purged while staged lands marked): a soft purge (MarkStale) of a response whose disk write is in
// flight returns at once, having only flagged the queued write in memory;
// the writer links the file with its stale byte clear and sets it only
// afterwards. Remove waits for commits under way (commitMu, the fix of
// TestPurgeDuringCommitResurrectsAfterCrash); MarkStale does not. Steps:
// Write(page); the writer links the file; MarkStale(page) returns; the
// machine dies (the directory copied as it is); the next start scans and
// serves the soft-purged page as fresh, without revalidation. Expected:
// the soft purge returns only once no file of the key can land unmarked
// (wait for commits as Remove does, or encode the write with its stale
// flag), so the record found after the crash is stale.
func TestS29DiskSoftPurgeDuringCommitIsLostInACrash(t *testing.T) {
	dir := t.TempDir()
	g := &s29LinkGateFS{osFS: osFS{tmp: filepath.Join(dir, "v1", "tmp")}, linked: make(chan struct{}), release: make(chan struct{})}
	tier, err := Open(Options{Dir: dir, MaxBytes: 1 << 20, FS: g, DownFor: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tier.Close(context.Background()) }()
	defer func() {
		select {
		case <-g.release:
		default:
			close(g.release)
		}
	}()
	tier.Write(rec("https://a/news", "yesterday's headline"))
	<-g.linked
	done := make(chan struct{})
	go func() { tier.MarkStale("https://a/news"); close(done) }()
	select {
	case <-done:
	case <-time.After(200 * time.Millisecond):
		// It waits for the commit, as Remove does: then the disk is
		// checked after it returns, below.
		close(g.release)
		<-done
	}
	crash := t.TempDir() // the machine dies the moment the soft purge returned
	copyTree(t, dir, crash)
	again := open(t, crash, 1<<20, nil)
	r, _ := again.Lookup("https://a/news", noVary)
	if r == nil {
		return // lost with the crash: a miss, which is safe
	}
	if !r.Stale {
		t.Fatalf("soft-purged page came back fresh after a crash: %q, stale=%v", r.Body, r.Stale)
	}
}

// fullFS fails every Stage with ENOSPC once armed; reads keep working, as
// on a full file system.
type s29FullFS struct {
	osFS
	mu   sync.Mutex
	full bool
}

func (f *s29FullFS) Stage(dir string, b []byte) (Staged, error) {
	f.mu.Lock()
	full := f.full
	f.mu.Unlock()
	if full {
		return nil, &pathErr{op: "write", path: dir, err: syscall.ENOSPC}
	}
	return f.osFS.Stage(dir, b)
}

type pathErr struct {
	op, path string
	err      error
}

func (e *pathErr) Error() string { return e.op + " " + e.path + ": " + e.err.Error() }
func (e *pathErr) Unwrap() error { return e.err }

// A review found (now mended: reads and writes counted apart): the tier goes down after three I/O errors "in a row", but every
// successful read resets the count. On a full disk (ENOSPC on every write,
// reads fine) under the usual mix of disk hits and fills, it never goes
// down: edge_disk_up stays 1 (EdgeDiskDown, whose runbook names a full
// disk, never fires), every fill still stages a file that fails, and each
// failure logs a warning. Steps: store a page; fill the disk; then 20
// times: a disk hit on the page, a write of a new page (ENOSPC). Expected:
// after 20 consecutive failed writes the tier reports down (Stats().Up
// false), as it does when no read happens between them.
func TestS29DiskFullDiskWithReadsNeverGoesDown(t *testing.T) {
	dir := t.TempDir()
	fsys := &s29FullFS{osFS: osFS{tmp: filepath.Join(dir, "v1", "tmp")}}
	tier := open(t, dir, 1<<20, fsys)
	tier.Write(rec("https://a/hot", "popular"))
	drain(t, tier)
	fsys.mu.Lock()
	fsys.full = true
	fsys.mu.Unlock()
	for i := range 20 {
		if get(tier, "https://a/hot") != "popular" {
			break // the tier went down: lookups skip it
		}
		tier.Write(rec(fmt.Sprintf("https://a/new/%d", i), "fill"))
		drain(t, tier)
	}
	st := tier.Stats()
	if st.WriteErrors < 3 {
		t.Fatalf("write errors = %d; the full disk was not exercised", st.WriteErrors)
	}
	if st.Up {
		t.Fatalf("every one of %d writes failed with ENOSPC, yet the tier is up (Stats %+v)", st.WriteErrors, st)
	}
}
