package cluster

import (
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
)

// A review's: a waiter re-polls start(pid) while the first run ends;
// done() dropped pid from running and recorded it under two separate
// locks, so a poll between them found the purge neither running nor taken
// and ran it again.
func TestAWaiterDoesNotRunATakenPurgeAgain(t *testing.T) {
	var s purgeIDs
	var again atomic.Int32
	for i := range 100 {
		pid := "p" + strconv.Itoa(i)
		if s.start(pid) != purgeNew {
			t.Fatal("first start")
		}
		var wg sync.WaitGroup
		var ready sync.WaitGroup
		for range 2 {
			wg.Add(1)
			ready.Add(1)
			go func() {
				defer wg.Done()
				ready.Done()
				for {
					switch s.start(pid) {
					case purgeRunning:
						continue // the handler's poll, without the 5 ms sleep
					case purgeNew:
						again.Add(1)
						s.done(pid, true)
					}
					return
				}
			}()
		}
		ready.Wait()
		s.done(pid, true)
		wg.Wait()
	}
	if n := again.Load(); n > 0 {
		t.Errorf("%d of 100 purges, taken by their first run, were started again by a waiting repeat", n)
	}
}
