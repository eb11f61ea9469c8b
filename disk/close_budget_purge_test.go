package disk

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Regression (review R1): Write racing Close sent on the closed queue and panicked.
func TestWriteDuringClosePanics(t *testing.T) {
	for i := 0; i < 20; i++ {
		tier, err := Open(Options{Dir: t.TempDir(), MaxBytes: 1 << 30})
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		var panicked atomic.Value
		start := make(chan struct{})
		for g := 0; g < 8; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer func() {
					if v := recover(); v != nil {
						panicked.Store(fmt.Sprint(v))
					}
				}()
				<-start
				for j := 0; j < 50; j++ {
					tier.Write(rec(fmt.Sprintf("https://a/%d", j), "x"))
				}
			}()
		}
		close(start)
		time.Sleep(50 * time.Microsecond)
		_ = tier.Close(context.Background())
		wg.Wait()
		if v := panicked.Load(); v != nil {
			t.Fatalf("iteration %d: Write during Close panicked: %v", i, v)
		}
	}
}

// slowStageFS delays every Stage so that the writers overlap.
type slowStageFS struct{ osFS }

func (s slowStageFS) Stage(dir string, b []byte) (Staged, error) {
	time.Sleep(30 * time.Millisecond)
	return s.osFS.Stage(dir, b)
}

// R2: four writers each reserve bytes; with nothing indexed yet to evict
// they all write anyway, and nothing brings the tier back under budget.
func TestBudgetExceededByParallelWriters(t *testing.T) {
	dir := t.TempDir()
	const max = 10000
	tier := open(t, dir, max, slowStageFS{osFS{tmp: filepath.Join(dir, "v1", "tmp")}})
	for i := 0; i < 4; i++ {
		r := rec(fmt.Sprintf("https://a/%d", i), strings.Repeat("x", 6000))
		r.Header.Del("Etag") // a ~6 KB file: each fits the budget alone
		tier.Write(r)
	}
	drain(t, tier)
	time.Sleep(50 * time.Millisecond)
	st := tier.Stats()
	if st.Bytes > max || du(t, filepath.Join(dir, "v1")) > max {
		t.Fatalf("budget %d exceeded: index says %d bytes, %d objects; files hold %d", max, st.Bytes, st.Objects, du(t, filepath.Join(dir, "v1")))
	}
}

// commitGateFS blocks the first Commit until released.
type commitGateFS struct {
	osFS
	atCommit, release chan struct{}
	once              sync.Once
}

type gatedStaged struct {
	Staged
	fs *commitGateFS
}

func (g gatedStaged) Commit(p string) error {
	g.fs.once.Do(func() { close(g.fs.atCommit); <-g.fs.release })
	return g.Staged.Commit(p)
}

func (c *commitGateFS) Stage(dir string, b []byte) (Staged, error) {
	s, err := c.osFS.Stage(dir, b)
	if err != nil {
		return nil, err
	}
	return gatedStaged{s, c}, nil
}

func copyTree(t *testing.T, src, dst string) {
	err := filepath.Walk(src, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		d := filepath.Join(dst, rel)
		if fi.IsDir() {
			return os.MkdirAll(d, 0o700)
		}
		in, err := os.Open(p)
		if err != nil {
			return err
		}
		defer in.Close()
		out, err := os.Create(d)
		if err != nil {
			return err
		}
		defer out.Close()
		_, err = io.Copy(out, in)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// R3: Remove promises "a purged file is removed before Remove returns", but
// a write being committed when the purge comes is linked after Remove
// returned and only queued for the async remover: a crash brings the
// purged object back.
func TestPurgeDuringCommitResurrectsAfterCrash(t *testing.T) {
	dir := t.TempDir()
	g := &commitGateFS{osFS: osFS{tmp: filepath.Join(dir, "v1", "tmp")}, atCommit: make(chan struct{}), release: make(chan struct{})}
	tier, err := Open(Options{Dir: dir, MaxBytes: 1 << 20, FS: g})
	if err != nil {
		t.Fatal(err)
	}
	tier.Write(rec("https://a/secret", "purged-content"))
	<-g.atCommit
	purged := make(chan struct{})
	go func() { tier.Remove("https://a/secret"); close(purged) }() // the purge comes mid-commit ...
	time.Sleep(50 * time.Millisecond)
	select {
	case <-purged:
		t.Fatal("the purge returned while a commit of its key was under way")
	default:
	}
	close(g.release) // ... the commit lands, then the purge returns
	<-purged
	crash := t.TempDir() // the machine dies the moment the purge returned: the disk as it is
	copyTree(t, dir, crash)
	again := open(t, crash, 1<<20, nil)
	if got := get(again, "https://a/secret"); got != "" {
		t.Fatalf("purged object resurrected after a crash: %q", got)
	}
}

// slowRemoveFS makes each removal take a while.
type slowRemoveFS struct{ osFS }

func (s slowRemoveFS) Remove(n string) error {
	time.Sleep(2 * time.Millisecond)
	return s.osFS.Remove(n)
}

// R4: the remover goroutine can take Remove's batch; Remove then returns
// with the purged file still on disk.
func TestRemoveReturnsBeforeFileGone(t *testing.T) {
	dir := t.TempDir()
	tier := open(t, dir, 1<<30, slowRemoveFS{osFS{tmp: filepath.Join(dir, "v1", "tmp")}})
	for i := 0; i < 300; i++ {
		key := fmt.Sprintf("https://a/%d", i)
		tier.Write(rec(key, "v"))
		drain(t, tier)
		tier.Remove(key)
		if n := countFiles(t, filepath.Join(dir, "v1")); n != 0 {
			t.Fatalf("iteration %d: Remove returned with %d purged file(s) still on disk", i, n)
		}
	}
}

func countFiles(t *testing.T, root string) int {
	n := 0
	for _, d := range shardDirs() {
		es, _ := os.ReadDir(filepath.Join(root, d))
		n += len(es)
	}
	return n
}

// delayFirstFS delays the Stage of records holding "old-body".
type delayOldFS struct{ osFS }

func (d delayOldFS) Stage(dir string, b []byte) (Staged, error) {
	if bytes.Contains(b, []byte("old-body")) {
		time.Sleep(100 * time.Millisecond)
	}
	return d.osFS.Stage(dir, b)
}

// R5: supersede drops only indexed variants; a pending write with other
// Vary names stays pending, lands after the newer one and replaces it.
func TestOlderPendingWriteWithOtherVaryWins(t *testing.T) {
	dir := t.TempDir()
	tier := open(t, dir, 1<<20, delayOldFS{osFS{tmp: filepath.Join(dir, "v1", "tmp")}})
	old := rec("https://a/v", "old-body") // no Vary
	tier.Write(old)
	time.Sleep(5 * time.Millisecond)
	nw := rec("https://a/v", "new-body") // the newer response varies on Cookie
	nw.VaryNames, nw.VaryKey = []string{"cookie"}, "a"
	tier.Write(nw)
	drain(t, tier)
	cookieA := func([]string) string { return "a" }
	cookieB := func([]string) string { return "b" }
	ra, _ := tier.Lookup("https://a/v", cookieA)
	rb, _ := tier.Lookup("https://a/v", cookieB)
	if ra == nil || string(ra.Body) != "new-body" || rb != nil {
		t.Fatalf("after a newer response: cookie=a gets %v, cookie=b gets %v (the older response)", body(ra), body(rb))
	}
}

func body(r *Record) string {
	if r == nil {
		return "<nil>"
	}
	return string(r.Body)
}

// R2b: the queue admits a record by an estimate (body + 512); a record
// with large header fields is larger than the whole budget once encoded,
// evicts everything and is written anyway.
func TestRecordLargerThanBudgetWritten(t *testing.T) {
	dir := t.TempDir()
	const max = 10000
	tier := open(t, dir, max, nil)
	tier.Write(rec("https://a/small", "keep me"))
	drain(t, tier)
	r := rec("https://a/big", strings.Repeat("x", 5000))
	r.Header.Set("Content-Security-Policy", strings.Repeat("p", 6000))
	tier.Write(r)
	drain(t, tier)
	time.Sleep(50 * time.Millisecond)
	if st := tier.Stats(); st.Bytes > max || get(tier, "https://a/small") == "" {
		t.Fatalf("budget %d: index holds %d bytes; the small object was evicted for a record that cannot fit: %q", max, st.Bytes, get(tier, "https://a/small"))
	}
}

// A snapshot that cannot be written is reported by every Close, not only
// the first: a second Close (an in-process restart after a cut-short one)
// returned nil, and the next start read the files instead of an index
// without anyone having been told why.
func TestEveryCloseReportsTheSnapshotError(t *testing.T) {
	tier, err := Open(Options{Dir: t.TempDir(), MaxBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	tier.Write(rec("http://a.test/p", "body"))
	// A directory where the snapshot's temporary file goes: opening it for
	// writing fails even for root.
	if err := os.Mkdir(tier.snapshotPath()+".tmp", 0o700); err != nil {
		t.Fatal(err)
	}
	first := tier.Close(context.Background())
	if first == nil {
		t.Fatal("Close returned nil with the snapshot unwritable")
	}
	second := tier.Close(context.Background())
	if second == nil || second.Error() != first.Error() {
		t.Fatalf("a second Close returned %v; the first returned %v", second, first)
	}
}
