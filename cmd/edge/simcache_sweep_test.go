package main

import "testing"

// TestSweepOfUpdateIntervalIsWhole: update-interval=1.9 once ran as 1 and
// was printed as 1.9; a fraction or a value below 1 is refused.
func TestSweepOfUpdateIntervalIsWhole(t *testing.T) {
	for _, s := range []string{"update-interval=1.9,1", "update-interval=0.5", "update-interval=0"} {
		if _, _, err := parseSweep(s); err == nil {
			t.Errorf("--sweep %s accepted", s)
		}
	}
	if _, vals, err := parseSweep("update-interval=16,64"); err != nil || len(vals) != 2 {
		t.Errorf("update-interval=16,64: %v %v", vals, err)
	}
	if _, vals, err := parseSweep("bpe=5.5,14"); err != nil || len(vals) != 2 {
		t.Errorf("bpe=5.5,14 (fractions are fine there): %v %v", vals, err)
	}
}
