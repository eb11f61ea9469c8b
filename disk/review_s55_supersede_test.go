package disk

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// s55StageGate is osFS whose Stage of a record holding mark blocks until
// release is closed, reporting once (at) that it was reached.
type s55StageGate struct {
	osFS
	mark    []byte
	at      chan struct{}
	release chan struct{}
	once    sync.Once
}

func newS55StageGate(dir, mark string) *s55StageGate {
	return &s55StageGate{osFS: osFS{tmp: filepath.Join(dir, "v1", "tmp")}, mark: []byte(mark),
		at: make(chan struct{}), release: make(chan struct{})}
}

func (g *s55StageGate) Stage(dir string, b []byte) (Staged, error) {
	if bytes.Contains(b, g.mark) {
		g.once.Do(func() { close(g.at) })
		<-g.release
	}
	return g.osFS.Stage(dir, b)
}

func (g *s55StageGate) open() {
	select {
	case <-g.release:
	default:
		close(g.release)
	}
}

func s55Wait(t *testing.T, c <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-c:
	case <-time.After(30 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
	}
}

// Write's contract (tier.go): "nothing older may outlive a newer
// response, written or queued". A newer response whose own write is
// dropped (the queue is full: a burst of fills; or it is too large for
// the queue) does not drop the older write of the same variant still
// queued or being written: that older response lands after the newer one
// was handed to the tier, and is served from disk once RAM lets the newer
// one go, and after a restart. supersede drops the queued writes of other
// Vary names only; a write of the same variant is replaced in pending
// only when the newer one is queued. proxy.Store.RemoveVariantUnlessReplaced
// relies on exactly this ("a Put after e's, which replaced e on the disk
// tier too"): see proxy/review_s55_supersede_test.go.
func TestS55DiskDroppedNewerWriteLetsTheOlderQueuedOneLand(t *testing.T) {
	dir := t.TempDir()
	gate := newS55StageGate(dir, "OLD-VERSION")
	t.Cleanup(gate.open)
	tier, err := Open(Options{Dir: dir, MaxBytes: 64 << 20, QueueBytes: 16 << 10, FS: gate, DownFor: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tier.Close(context.Background()) })

	const key = "http://a.test/article"
	tier.Write(rec(key, "OLD-VERSION"))
	s55Wait(t, gate.at, "the old write to be staged")
	// The newer response: larger than what the queue has left.
	tier.Write(rec(key, "NEW-VERSION "+strings.Repeat("n", 16<<10)))
	if d := tier.Stats().Dropped; d != 1 {
		t.Fatalf("the newer write was not dropped (dropped %d): the test needs it to be", d)
	}
	gate.open()
	drain(t, tier)
	if got := get(tier, key); strings.HasPrefix(got, "OLD") {
		t.Errorf("after a newer response for the variant was written, the disk serves the older one: %q", got)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := tier.Close(ctx); err != nil {
		t.Fatal(err)
	}
	again := open(t, dir, 64<<20, nil)
	if got := get(again, key); strings.HasPrefix(got, "OLD") {
		t.Errorf("after a restart, the disk serves the older response: %q", got)
	}
}
