package disk

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// s55LinkedThenFailsFS is osFS whose Commit makes the file visible and
// then reports an error, as unnamed.Commit does when the link succeeds
// and closing the inode fails (fs.go: "return u.f.Close()"; a network
// file system reports deferred write errors at close).
type s55LinkedThenFailsFS struct{ osFS }

type s55LinkedThenFails struct{ Staged }

func (s s55LinkedThenFails) Commit(p string) error {
	if err := s.Staged.Commit(p); err != nil {
		return err
	}
	return errors.New("close: input/output error")
}

func (f s55LinkedThenFailsFS) Stage(dir string, b []byte) (Staged, error) {
	s, err := f.osFS.Stage(dir, b)
	if err != nil {
		return nil, err
	}
	return s55LinkedThenFails{s}, nil
}

// A commit that reports an error after the file was linked leaves the
// file under its name, in no index and in no removal queue: the tier
// counts the write as failed (and its bytes as free), a purge of the key
// finds nothing to remove and reports success, and the next start's scan
// brings the purged record back.
func TestS55DiskCommitErrorAfterTheLinkLeavesAFileAPurgeCannotReach(t *testing.T) {
	dir := t.TempDir()
	tier, err := Open(Options{Dir: dir, MaxBytes: 64 << 20, FS: s55LinkedThenFailsFS{osFS{tmp: filepath.Join(dir, "v1", "tmp")}}, DownFor: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tier.Close(context.Background()) })
	const key = "http://a.test/secret-draft"
	tier.Write(rec(key, "draft"))
	drain(t, tier)
	if st := tier.Stats(); st.WriteErrors != 1 || st.Objects != 0 {
		t.Fatalf("write errors %d, objects %d: want the write counted as failed", st.WriteErrors, st.Objects)
	}
	if n := tier.Remove(key); n != 0 {
		t.Logf("purge removed %d", n)
	}
	if tier.RemoveFailures() != 0 {
		t.Fatalf("the purge reports failures: %d", tier.RemoveFailures())
	}
	var left []string
	_ = filepath.Walk(filepath.Join(dir, "v1"), func(p string, fi os.FileInfo, err error) error {
		if err == nil && !fi.IsDir() && len(fi.Name()) > 32 {
			left = append(left, p)
		}
		return nil
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_ = tier.Close(ctx)
	_ = os.Remove(filepath.Join(dir, "v1", "index.snap")) // a crash: the next start scans

	again := open(t, dir, 64<<20, nil)
	if got := get(again, key); got != "" || len(left) > 0 {
		t.Errorf("a purge returned with nothing to remove and no failure, yet %d file(s) of the key stayed (%v); after a crash the scan serves %q",
			len(left), left, got)
	}
}
