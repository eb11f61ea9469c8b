package disk

import (
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// HOLDS: OnRemove under -race with concurrent writes (evicting to a small
// byte budget), purges, variant removals, Vary replacements and lookups.
// Only written keys are heard; the hook runs under t.mu (TryLock fails inside it) and may
// hand work to another goroutine that calls back into the tier without a
// deadlock.
func TestS15OnRemoveConcurrentHolds(t *testing.T) {
	tier := open(t, t.TempDir(), 8<<10, nil)
	var mu sync.Mutex
	heard := map[string]int{}
	var unlocked atomic.Int64
	kick := make(chan string, 1)
	tier.OnRemove(func(key string) {
		if tier.mu.TryLock() {
			tier.mu.Unlock()
			unlocked.Add(1)
		}
		mu.Lock()
		heard[key]++
		mu.Unlock()
		select {
		case kick <- key:
		default:
		}
	})
	stop := make(chan struct{})
	var side sync.WaitGroup
	side.Add(1)
	go func() { // calls back into the tier, outside the hook
		defer side.Done()
		for {
			select {
			case k := <-kick:
				tier.Has(k)
				tier.Stats()
			case <-stop:
				return
			}
		}
	}()
	var wg sync.WaitGroup
	var written sync.Map
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 150; i++ {
				k := "k" + strconv.Itoa((g*7+i)%40)
				switch i % 5 {
				case 0, 1:
					r := rec(k, "body-"+strconv.Itoa(g)+"-"+strconv.Itoa(i)+string(make([]byte, 400)))
					written.Store(k, true)
					tier.Write(r)
				case 2:
					r := rec(k, "v")
					r.VaryNames, r.VaryKey = []string{"Accept"}, "a"+strconv.Itoa(i%3)
					written.Store(k, true)
					tier.Write(r)
				case 3:
					tier.Remove(k)
				case 4:
					tier.Lookup(k, noVary)
					tier.RemoveVariant(k, "a1")
				}
			}
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); drain(t, tier); close(done) }()
	select {
	case <-done:
	case <-time.After(4 * time.Second):
		t.Fatal("deadlock: writers did not finish")
	}
	close(stop)
	side.Wait()
	if unlocked.Load() != 0 {
		t.Errorf("the hook ran %d times without t.mu held", unlocked.Load())
	}
	mu.Lock()
	defer mu.Unlock()
	for k := range heard {
		if _, ok := written.Load(k); !ok {
			t.Errorf("heard %q, never written", k)
		}
	}
	if len(heard) == 0 {
		t.Error("an 8 KiB budget with ~100 KiB written evicted nothing the hook heard")
	}
}

// HOLDS: a key stored, then purged, is heard exactly for its variants; a
// key never stored (a Remove of nothing) and a soft purge (MarkStale, the
// key still held) are not heard.
func TestS15OnRemoveExactHolds(t *testing.T) {
	tier := open(t, t.TempDir(), 1<<20, nil)
	var mu sync.Mutex
	heard := map[string]int{}
	tier.OnRemove(func(k string) { mu.Lock(); heard[k]++; mu.Unlock() })
	a1, a2 := rec("a", "1"), rec("a", "2")
	a1.VaryNames, a1.VaryKey = []string{"Accept"}, "x"
	a2.VaryNames, a2.VaryKey = []string{"Accept"}, "y"
	tier.Write(a1)
	tier.Write(a2)
	tier.Write(rec("b", "b"))
	drain(t, tier)
	tier.MarkStale("b")
	tier.Remove("nothing")
	mu.Lock()
	if len(heard) != 0 {
		t.Errorf("heard %v before any removal", heard)
	}
	mu.Unlock()
	if n := tier.Remove("a"); n != 2 {
		t.Fatalf("Remove a: %d", n)
	}
	mu.Lock()
	defer mu.Unlock()
	if heard["a"] != 2 || heard["b"] != 0 {
		t.Errorf("heard %v, want a twice, b never", heard)
	}
}
