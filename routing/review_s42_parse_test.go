package routing

// S42 review: the package's parsers (ParseMode, ParseHome,
// ParsePlacement). Before this file no routing test fed them malformed
// input (config/config_test.go covers bad routing.mode and routing.home
// values, not routing.placement).
//
// TestS42ParsersRejectMalformed PINS a property that holds: every name
// round-trips; case variants, padding, NUL, empty, prefixes, huge and
// binary input are errors and never panic.
//
// TestS42StringOfUnknownPlacement DEMONSTRATED A (cosmetic) DEFECT (failed
// before 2026-12-07): Mode(9) and Home(9) print as "Mode(9)"/"Home(9)", but an unknown
// Placement prints as "paper" (tree.go: String), and AppendPath likewise
// treats any value other than PlacementDistinct as the paper placement.

import (
	"strings"
	"testing"
)

func TestS42ParsersRejectMalformed(t *testing.T) {
	for _, m := range []Mode{ModeHybrid, ModeTree, ModeRing, ModeNone} {
		if got, err := ParseMode(m.String()); err != nil || got != m {
			t.Errorf("mode %v round trip: %v %v", m, got, err)
		}
	}
	for _, h := range []Home{HomeGlobal, HomeRegion} {
		if got, err := ParseHome(h.String()); err != nil || got != h {
			t.Errorf("home %v round trip: %v %v", h, got, err)
		}
	}
	for _, p := range []Placement{PlacementPaper, PlacementDistinct} {
		if got, err := ParsePlacement(p.String()); err != nil || got != p {
			t.Errorf("placement %v round trip: %v %v", p, got, err)
		}
	}
	bad := []string{"", " ", "Hybrid", "TREE", " ring", "ring ", "ring\x00", "hybrid,tree", "hyb", "paperx", "Distinct",
		"distinct\n", "global ", "REGION", "Mode(0)", "0", "1", strings.Repeat("a", 1<<20), "\xff\xfe", "ｒｉｎｇ"}
	for _, s := range bad {
		if _, err := ParseMode(s); err == nil {
			t.Errorf("ParseMode accepted %q", s)
		}
		if _, err := ParseHome(s); err == nil {
			t.Errorf("ParseHome accepted %q", s)
		}
		if _, err := ParsePlacement(s); err == nil {
			t.Errorf("ParsePlacement accepted %q", s)
		}
	}
	if Mode(-1).String() != "Mode(-1)" || Home(7).String() != "Home(7)" {
		t.Error("out-of-range mode/home names")
	}
}

func TestS42StringOfUnknownPlacement(t *testing.T) {
	if s := Placement(9).String(); s == "paper" {
		t.Errorf("Placement(9).String() = %q: an unknown placement is shown as the paper placement", s)
	}
}
