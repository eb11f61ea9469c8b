package proxy

import (
	"fmt"
	"sync"
	"testing"
)

// Withstood: reloads that add, remove and rename sites and change the
// pool while requests of every site (and of none) take and give back
// slots, each released once through releaser as the handler's paths do,
// leave nothing behind: no slot counted once they are all given back,
// no removed site's record left, every configured site's part unused
// again (so nothing is refused for a part that drifted). Run with -race.
func TestS33SlotsSurviveSiteChurnUnderLoad(t *testing.T) {
	var s upstreamSlots
	s.setLimit(16)
	s.setSites(0.5, []string{"a", "b"})
	sets := [][]string{{"a", "b"}, {"a", "c"}, {"c"}, {"b", "c", "d"}, nil, {"a", "b", "c", "d", "e"}, {"e", "a"}}
	limits := []int{16, 4, 32, 9}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for g := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			names := []string{"a", "b", "c", "d", "e", ""}
			var held []func()
			for i := 0; ; i++ {
				select {
				case <-stop:
					for _, rel := range held {
						rel()
						rel() // a second call must be a no-op
					}
					return
				default:
				}
				if slot, why := s.acquire(names[(g+i)%len(names)]); why == "" {
					held = append(held, slot.releaser())
				}
				if len(held) > 3 || (i%3 == 0 && len(held) > 0) {
					held[0]()
					held = held[1:]
				}
			}
		}()
	}
	for i := range 400 {
		if i%2 == 0 {
			s.setSites(0.5, sets[i%len(sets)])
		} else {
			s.setLimit(limits[i%len(limits)])
		}
	}
	s.setLimit(16)
	close(stop)
	wg.Wait()
	final := []string{"a", "b", "c"}
	s.setSites(0.5, final)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.used != 0 {
		t.Errorf("slots counted after every one was given back: %d", s.used)
	}
	var extra []string
	for name, ss := range s.sites {
		if ss.used != 0 {
			t.Errorf("site %q still holds %d", name, ss.used)
		}
		if !ss.configured {
			extra = append(extra, fmt.Sprintf("%q", name))
		}
	}
	if len(extra) > 0 {
		t.Errorf("records of sites no longer configured left behind: %v", extra)
	}
	if want := s.reserve * len(final); s.unused != want {
		t.Errorf("unused parts %d, want %d (%d sites × %d)", s.unused, want, len(final), s.reserve)
	}
}
