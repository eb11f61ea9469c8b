package disk

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// roFS is a disk whose file system went read-only (ext4's default
// errors=remount-ro after an I/O error): reads work, unlinks and
// in-place writes fail with EROFS.
type roFS struct {
	osFS
	ro bool
}

func (f *roFS) Remove(n string) error {
	if f.ro {
		return &os.PathError{Op: "unlink", Path: n, Err: syscall.EROFS}
	}
	return f.osFS.Remove(n)
}

func (f *roFS) SetStale(n string) error {
	if f.ro {
		return &os.PathError{Op: "open", Path: n, Err: syscall.EROFS}
	}
	return f.osFS.SetStale(n)
}

// A purge whose unlink fails (a disk gone read-only, ext4's default
// errors=remount-ro after an I/O error) forgets the object in this process,
// and is counted, so that the proxy reports the purge incomplete
// (proxy.ErrPurgeIncomplete): the file it could not remove may come back at
// the next start's scan, which nothing on a read-only disk can prevent, and
// the operator is told to purge again (a review found it reported success).
func TestPurgeOnAFailingDiskIsCountedAndHoldsInProcess(t *testing.T) {
	tier, f := tierOnReadOnlyFS(t)
	tier.Write(rec("https://a/leaked-price", "old-secret"))
	drain(t, tier)
	f.ro = true // the file system goes read-only
	if n := tier.Remove("https://a/leaked-price"); n != 1 {
		t.Fatalf("purge removed %d", n)
	}
	if got := tier.RemoveFailures(); got != 1 {
		t.Errorf("RemoveFailures %d after a purge whose unlink failed, want 1", got)
	}
	if get(tier, "https://a/leaked-price") != "" {
		t.Fatal("served after the purge")
	}
}

// A soft purge whose write of the file's stale flag fails holds in this
// process (the index's flag is read with the file), and is counted.
func TestSoftPurgeOnAFailingDiskIsCountedAndHoldsInProcess(t *testing.T) {
	tier, f := tierOnReadOnlyFS(t)
	tier.Write(rec("https://a/p", "v1"))
	drain(t, tier)
	f.ro = true
	if n := tier.MarkStale("https://a/p"); n != 1 {
		t.Fatalf("soft purge marked %d", n)
	}
	if r, _ := tier.Lookup("https://a/p", noVary); r == nil || !r.Stale {
		t.Errorf("after a soft purge whose flag could not be written the record reads %+v, want stale", r)
	}
	if got := tier.RemoveFailures(); got != 1 {
		t.Errorf("RemoveFailures %d, want 1", got)
	}
}

// tierOnReadOnlyFS opens a tier on files whose file system goes
// read-only when the returned roFS's ro is set.
func tierOnReadOnlyFS(t *testing.T) (*Tier, *roFS) {
	t.Helper()
	dir := t.TempDir()
	f := &roFS{osFS: osFS{tmp: filepath.Join(dir, "v1", "tmp")}}
	tier, err := Open(Options{Dir: dir, MaxBytes: 1 << 20, FS: f})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tier.Close(context.Background()) })
	return tier, f
}
