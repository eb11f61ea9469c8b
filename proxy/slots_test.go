package proxy

import (
	"math/rand/v2"
	"testing"
)

// inFlight is the upstream slots held, every site's.
func (s *upstreamSlots) inFlight() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.used
}

// takeEverySlot takes the free upstream slots, for tests of what an
// overloaded handler does; release each to give them back.
func takeEverySlot(h *Handler) []upstreamSlot {
	var taken []upstreamSlot
	for {
		slot, why := h.upstream.acquire("")
		if why != "" {
			return taken
		}
		taken = append(taken, slot)
	}
}

func TestUpstreamSlotsKeepEachSitesPart(t *testing.T) {
	var s upstreamSlots
	s.setLimit(8)
	s.setSites(0.5, []string{"dead", "live"}) // 4 reserved: 2 each
	take := func(site string, n int) []upstreamSlot {
		t.Helper()
		var out []upstreamSlot
		for i := range n {
			slot, why := s.acquire(site)
			if why != "" {
				t.Fatalf("%s: slot %d of %d refused (%s)", site, i+1, n, why)
			}
			out = append(out, slot)
		}
		return out
	}
	refused := func(site, want string) {
		t.Helper()
		if slot, why := s.acquire(site); why != want {
			slot.release()
			t.Fatalf("%s: got %q, want refused %q", site, why, want)
		}
	}
	dead := take("dead", 6) // its own 2 and the 4 nobody's
	refused("dead", refusedSiteOverload)
	refused("", refusedSiteOverload) // a request of no site has no part
	live := take("live", 2)
	refused("live", refusedOverload)
	live[0].release()
	refused("dead", refusedSiteOverload) // live's part again
	take("live", 1)
	for _, slot := range dead {
		slot.release()
	}
	take("live", 4) // with its 2: the whole pool but dead's part
	refused("live", refusedSiteOverload)
	take("dead", 2)
	if got := s.inFlight(); got != 8 {
		t.Fatalf("in flight %d, want 8", got)
	}
}

func TestUpstreamSlotsOneSiteOrNoShareIsOnePool(t *testing.T) {
	for _, tc := range []struct {
		name  string
		share float64
		sites []string
	}{
		{"one site", 0.5, []string{"only"}},
		{"share 0", 0, []string{"a", "b"}},
		{"no sites", 0.5, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var s upstreamSlots
			s.setLimit(5)
			s.setSites(tc.share, tc.sites)
			site := "a"
			if len(tc.sites) > 0 {
				site = tc.sites[0]
			}
			for i := range 5 {
				if _, why := s.acquire(site); why != "" {
					t.Fatalf("slot %d refused: %s", i+1, why)
				}
			}
			if _, why := s.acquire(site); why != refusedOverload {
				t.Fatalf("sixth: %q, want %q", why, refusedOverload)
			}
		})
	}
}

func TestUpstreamSlotsPartsNeverExceedThePool(t *testing.T) {
	for _, tc := range []struct {
		limit, sites, want int
	}{
		{10000, 2, 2500},
		{10000, 50, 100},
		{8, 2, 2},
		{30, 20, 1}, // at least one each when the pool has one for each
		{8, 20, 0},  // fewer slots than sites: one pool
		{3, 5, 0},   // fewer slots than sites: one pool
		{1, 2, 0},   // idem
		{10, 10, 1}, // a part each, and nothing left over
	} {
		var s upstreamSlots
		s.setLimit(tc.limit)
		names := make([]string, tc.sites)
		for i := range names {
			names[i] = string(rune('a' + i))
		}
		s.setSites(0.5, names)
		if _, reserve := s.inUse(); reserve != tc.want || reserve*tc.sites > tc.limit {
			t.Errorf("limit %d, %d sites: part %d, want %d", tc.limit, tc.sites, reserve, tc.want)
		}
	}
}

// A reload that removes a site while its requests hold slots: they keep
// them until they end, against no part, and the remaining sites' parts
// are computed anew.
func TestUpstreamSlotsReloadKeepsRequestsUnderWay(t *testing.T) {
	var s upstreamSlots
	s.setLimit(12)
	s.setSites(0.5, []string{"a", "b", "c"}) // 2 each
	var held []upstreamSlot
	for range 8 {
		slot, why := s.acquire("a")
		if why != "" {
			t.Fatalf("a: %s", why)
		}
		held = append(held, slot)
	}
	s.setSites(0.5, []string{"b", "c"}) // 3 each; a's 8 still held
	if _, why := s.acquire("a"); why != refusedSiteOverload {
		t.Fatalf("removed site: %q, want %q", why, refusedSiteOverload)
	}
	for _, site := range []string{"b", "b"} {
		if _, why := s.acquire(site); why != "" {
			t.Fatalf("%s after the reload: %s", site, why)
		}
	}
	for _, slot := range held {
		slot.release()
	}
	if by, _ := s.inUse(); by["a"] != 0 || len(by) != 2 {
		t.Fatalf("after the removed site's requests ended: %v, want b and c only", by)
	}
	checkSlotInvariants(t, &s)
}

// Random takes, releases, reloads and limit changes: the counts agree
// with the slots held, no more than the limit are ever taken by a change
// of nothing, and a site under its part is refused only when the pool is
// full.
func TestUpstreamSlotsInvariantsUnderRandomOperations(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	sites := []string{"a", "b", "c", "d", ""}
	var s upstreamSlots
	s.setLimit(20)
	s.setSites(0.5, sites[:4])
	var held []upstreamSlot
	for i := range 20000 {
		switch op := rng.IntN(20); {
		case op < 10:
			site := sites[rng.IntN(len(sites))]
			s.mu.Lock()
			ss := s.sites[site]
			under := ss != nil && ss.configured && ss.used < s.reserve
			before, limit := s.used, s.limit
			s.mu.Unlock()
			slot, why := s.acquire(site)
			if why == "" {
				held = append(held, slot)
				if before >= limit {
					t.Fatalf("op %d: a slot past the limit (%d of %d)", i, before+1, limit)
				}
			} else if under && before < limit {
				t.Fatalf("op %d: %q under its part refused (%s) with %d of %d used", i, site, why, before, limit)
			}
		case op < 18 && len(held) > 0:
			k := rng.IntN(len(held))
			held[k].release()
			held = append(held[:k], held[k+1:]...)
		case op == 18:
			s.setLimit(10 + rng.IntN(20))
		default:
			n := 2 + rng.IntN(3)
			s.setSites(float64(rng.IntN(3))/2, sites[:n])
		}
		checkSlotInvariants(t, &s)
		if got := s.inFlight(); got != len(held) {
			t.Fatalf("op %d: %d counted, %d held", i, got, len(held))
		}
	}
}

func checkSlotInvariants(t *testing.T, s *upstreamSlots) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	used, unused := 0, 0
	for name, ss := range s.sites {
		if ss.name != name || ss.used < 0 {
			t.Fatalf("site %q: %+v", name, ss)
		}
		used += ss.used
		if ss.configured {
			unused += max(0, s.reserve-ss.used)
		} else if ss.used == 0 {
			t.Fatalf("site %q holds nothing and is kept", name)
		}
	}
	if used != s.used || unused != s.unused {
		t.Fatalf("counts: used %d (sites %d), unused parts %d (sites %d)", s.used, used, s.unused, unused)
	}
}
