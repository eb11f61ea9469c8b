package disk

import (
	"context"
	"testing"
)

// Close with a context already over (node.Run passes the shutdown
// context after the drain used up its deadline) picks at random between
// "writers done" and "context over" when both are ready: with nothing
// left to write it still returns "not flushed" about half the time,
// writes no snapshot and keeps the directory's lock. A second Close
// returns nil at once (closed.Swap) and releases nothing, so the tier's
// directory cannot be opened again in the process (an in-process
// restart, as node tests do) until it exits.
func TestS55DiskCloseWithAnExpiredContextKeepsTheLockWithNothingToWrite(t *testing.T) {
	expired, cancel := context.WithCancel(context.Background())
	cancel()
	for i := range 20 {
		dir := t.TempDir()
		tier, err := Open(Options{Dir: dir, MaxBytes: 1 << 20})
		if err != nil {
			t.Fatal(err)
		}
		tier.Write(rec("http://a.test/p", "body"))
		drain(t, tier)
		first := tier.Close(expired)
		second := tier.Close(context.Background())
		again, err := Open(Options{Dir: dir, MaxBytes: 1 << 20})
		if err != nil {
			t.Fatalf("round %d: nothing left to write; Close(expired) = %v, Close again = %v; reopening: %v", i, first, second, err)
		}
		if !again.Recovery().FromSnapshot {
			t.Errorf("round %d: nothing left to write, yet no snapshot was written (Close: %v)", i, first)
		}
		_ = again.Close(context.Background())
	}
}
