package routing

import (
	"fmt"
	"strings"
)

// Mode is how a cluster routes a miss.
type Mode int

// The routing modes.
const (
	// ModeHybrid sends a cold page to its home cache only and spreads a
	// hot one over its random tree, with the home last before the origin.
	ModeHybrid Mode = iota
	// ModeTree always climbs the page's random tree (the paper's scheme).
	ModeTree
	// ModeRing sends every miss to the page's one owner on the ring.
	ModeRing
	// ModeNone makes every node a cache of its own.
	ModeNone
)

var modeNames = [...]string{"hybrid", "tree", "ring", "none"}

func (m Mode) String() string {
	if m < 0 || int(m) >= len(modeNames) {
		return fmt.Sprintf("Mode(%d)", int(m))
	}
	return modeNames[m]
}

// ParseMode parses a mode name (hybrid, tree, ring or none).
func ParseMode(s string) (Mode, error) {
	for i, n := range modeNames {
		if s == n {
			return Mode(i), nil
		}
	}
	return 0, fmt.Errorf("routing: mode %q, want one of %s", s, strings.Join(modeNames[:], ", "))
}

// Home is where a page's home cache is.
type Home int

// The home placements.
const (
	// HomeGlobal gives a page one home in the cluster.
	HomeGlobal Home = iota
	// HomeRegion gives a page a home in each region: the first member of
	// its rendezvous ranking in the region, so that a miss's first hop
	// stays in the region.
	HomeRegion
)

var homeNames = [...]string{"global", "region"}

func (h Home) String() string {
	if h < 0 || int(h) >= len(homeNames) {
		return fmt.Sprintf("Home(%d)", int(h))
	}
	return homeNames[h]
}

// ParseHome parses a home placement name (global or region).
func ParseHome(s string) (Home, error) {
	for i, n := range homeNames {
		if s == n {
			return Home(i), nil
		}
	}
	return 0, fmt.Errorf("routing: home %q, want one of %s", s, strings.Join(homeNames[:], ", "))
}
