package disk

import (
	"testing"
	"time"
)

// A review found (now mended: MarkStale waits for every write of its key
// linking its file, a replaced one too, then marks the files queued for
// the remover; the link is released while it waits, as a slow link
// ends): a soft purge misses the file of a write that was already being
// committed when a newer write of the same page replaced it in the queue,
// so a crash right after the purge returned brings the page back fresh.
// MarkStale waits only for the committing writes still in t.pending[key]
// and marks the files in t.unlinks/t.removing as they are when it looks;
// the replaced write is in neither: it is no longer pending (the newer
// write took its slot), and it puts its file, linked unmarked, on the
// remover's queue only after MarkStale has looked and returned.
// Steps: page P, v1 written, its link into place slow (gated Commit);
// v2 of P arrives and is queued (another writer, its Stage slow);
// MarkStale(P) returns at once; v1's link finishes, it finds itself
// replaced and queues its file for the remover (slow); the machine dies.
// Expected: at the next start P is stale or absent (the purge returned
// before the crash). Actual: v1's file is scanned back unmarked and
// served fresh without revalidation.
func TestS31DiskSoftPurgeMissesAReplacedWriteCommitting(t *testing.T) {
	dir := t.TempDir()
	g := newS30GateFS(dir)
	tier := open(t, dir, 1<<20, g)
	defer s30Release(g.commitRelease)
	defer s30Release(g.stageRelease)
	defer s30Release(g.removeRelease)
	const p = "https://a/p"

	g.mu.Lock()
	g.commitHash = fileName(p, "")
	g.mu.Unlock()
	tier.Write(rec(p, "v1-body"))
	select {
	case <-g.commitAt:
	case <-time.After(5 * time.Second):
		t.Fatal("v1 never reached its commit")
	}

	g.mu.Lock()
	g.stageMark = "v2-body"
	g.mu.Unlock()
	tier.Write(rec(p, "v2-body"))
	select {
	case <-g.stageAt:
	case <-time.After(5 * time.Second):
		t.Fatal("v2 never reached its stage")
	}
	g.mu.Lock()
	g.removeArmed = true
	g.mu.Unlock()

	done := make(chan int, 1)
	go func() { done <- tier.MarkStale(p) }()
	time.Sleep(100 * time.Millisecond) // the purge is under way: v1's slow link now ends
	s30Release(g.commitRelease)
	var n int
	select {
	case n = <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("MarkStale did not return")
	}
	select {
	case <-g.removeAt:
	case <-time.After(5 * time.Second):
		t.Fatal("v1's replaced file never reached the remover")
	}

	crash := t.TempDir()
	copyTree(t, dir, crash)
	again := open(t, crash, 1<<20, nil)
	r, _ := again.Lookup(p, noVary)
	if r != nil && !r.Stale {
		t.Fatalf("soft purge (MarkStale returned %d) then a crash: %q served fresh at the next start", n, r.Body)
	}
}

// Held: a soft purge of key B returns while a write of the same key B is
// blocked in Stage (before committing) and while a write of an unrelated
// key A is blocked in its link; both land marked / unaffected.
func TestS31DiskSoftPurgeWaitsForNoOtherKey(t *testing.T) {
	dir := t.TempDir()
	g := newS30GateFS(dir)
	tier := open(t, dir, 1<<20, g)
	defer s30Release(g.commitRelease)
	defer s30Release(g.stageRelease)
	g.mu.Lock()
	g.commitHash = fileName("https://a/a", "")
	g.stageMark = "b-body"
	g.mu.Unlock()
	tier.Write(rec("https://a/a", "a-body"))
	<-g.commitAt
	tier.Write(rec("https://a/b", "b-body"))
	<-g.stageAt
	done := make(chan struct{})
	go func() { tier.MarkStale("https://a/b"); tier.MarkStale("https://a/c"); close(done) }()
	select {
	case <-done:
	case <-time.After(2 * time.Second):
		t.Fatal("a soft purge waited on another key's commit or a staging write")
	}
	g.mu.Lock()
	g.stageMark = ""
	g.mu.Unlock()
	s30Release(g.stageRelease)
	s30Release(g.commitRelease)
	drain(t, tier)
	if r, _ := tier.Lookup("https://a/b", noVary); r == nil || !r.Stale {
		t.Fatalf("B: %+v", r)
	}
	if r, _ := tier.Lookup("https://a/a", noVary); r == nil || r.Stale {
		t.Fatalf("A: %+v", r)
	}
}
