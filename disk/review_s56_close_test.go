package disk

import (
	"context"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// s56GateFS is osFS whose Stage waits for a gate: a write held on a slow
// disk.
type s56GateFS struct {
	osFS
	entered chan struct{}
	gate    chan struct{}
}

func (f s56GateFS) Stage(dir string, b []byte) (Staged, error) {
	select {
	case f.entered <- struct{}{}:
	default:
	}
	select {
	case <-f.gate:
	case <-time.After(30 * time.Second):
	}
	return f.osFS.Stage(dir, b)
}

// TestS56DiskSecondCloseAfterACutShortOneReportsTheTierClosed: a Close
// cut short by its context (a write on a slow disk) leaves the snapshot
// and the directory's lock to a goroutine that waits for the writer. A
// second Close then returns nil at once, while the writer still runs and
// the lock is held: its caller (an in-process restart) takes the tier as
// closed, and opening the directory again fails.
func TestS56DiskSecondCloseAfterACutShortOneReportsTheTierClosed(t *testing.T) {
	dir := t.TempDir()
	fsys := s56GateFS{osFS: osFS{tmp: filepath.Join(dir, "v1", "tmp")}, entered: make(chan struct{}, 1), gate: make(chan struct{})}
	var once sync.Once
	release := func() { once.Do(func() { close(fsys.gate) }) }
	t.Cleanup(release)
	tier, err := Open(Options{Dir: dir, MaxBytes: 1 << 20, FS: fsys, DownFor: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	tier.Write(rec("http://a.test/p", "body"))
	select {
	case <-fsys.entered:
	case <-time.After(20 * time.Second):
		t.Fatal("the write never reached the disk")
	}
	expired, cancel := context.WithCancel(context.Background())
	cancel()
	first := tier.Close(expired)
	if first == nil {
		t.Fatal("Close with a write held and its context over returned nil")
	}
	ctx, cancel2 := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel2()
	second := tier.Close(ctx)
	again, err := Open(Options{Dir: dir, MaxBytes: 1 << 20})
	if err == nil {
		_ = again.Close(context.Background())
	}
	if second == nil && err != nil {
		t.Errorf("the second Close returned nil while the writer still ran (first: %v); opening the directory: %v", first, err)
	}
	release()
	// The goroutine lets the lock go once the writer is done.
	deadline := time.Now().Add(20 * time.Second)
	for {
		a, err := Open(Options{Dir: dir, MaxBytes: 1 << 20})
		if err == nil {
			_ = a.Close(context.Background())
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the lock was never let go after the writer ended: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
