package fdetect

import (
	"math"
	"math/rand"
	"testing"
)

// nopDet is a detector that says nothing: only the wrapper is tested.
type nopDet struct{}

func (nopDet) Observe(uint64, int64) {}
func (nopDet) Freshness() int64      { return 0 }

// countRuns counts the runs of consecutive sequence numbers in lost.
func countRuns(lost map[uint64]bool) int {
	n := 0
	for s := range lost {
		if !lost[s-1] {
			n++
		}
	}
	return n
}

// LossRuns against a brute-force recount of the losses counted and not
// undone, over random sequences with loss, swaps, late arrivals up to 80
// back and duplicates (a second hostile review; it found the window-edge
// split at 63 back).
func TestLossRunsAgreesWithABruteForceRecount(t *testing.T) {
	for seed := int64(0); seed < 300; seed++ {
		rng := rand.New(rand.NewSource(seed))
		d := NewLossAwareWith(nopDet{}, 1e8, DefaultLossBudget, LossRuns)
		// reference
		lost := map[uint64]bool{} // counted lost and not undone
		var last uint64
		seen := false
		got := map[uint64]bool{}
		seqs := []uint64{}
		for s := uint64(1); s < 400; s++ {
			if rng.Float64() < 0.3 {
				continue
			}
			seqs = append(seqs, s)
		}
		// jitter: swap some neighbours, move some far back, duplicates
		for i := range seqs {
			if rng.Float64() < 0.2 && i+1 < len(seqs) {
				seqs[i], seqs[i+1] = seqs[i+1], seqs[i]
			}
		}
		for i := 0; i < 20; i++ {
			j := rng.Intn(len(seqs))
			k := min(len(seqs)-1, j+rng.Intn(80))
			v := seqs[j]
			copy(seqs[j:], seqs[j+1:k+1])
			seqs[k] = v
		}
		for i := 0; i < 10; i++ {
			j := rng.Intn(len(seqs))
			seqs = append(seqs[:j+1], seqs[j:]...)
		}
		for _, s := range seqs {
			before := d.runs
			runsBefore := countRuns(lost)
			late := seen && s < last
			d.Observe(s, 0)
			if seen && s > last {
				if g := s - last - 1; g <= LossMaxExtra {
					for x := last + 1; x < s; x++ {
						if !got[x] {
							lost[x] = true
						}
					}
				}
			}
			undone := false
			if late && lost[s] && last-s < 63 {
				delete(lost, s)
				undone = true
			}
			got[s] = true
			if !seen || s > last {
				last, seen = s, true
			}
			// bits check
			for b := uint64(0); b < 64 && b <= last; b++ {
				want := lost[last-b]
				if have := d.lostBits&(1<<b) != 0; have != want {
					t.Fatalf("seed %d after %d: bit %d (hb %d) have %v want %v", seed, s, b, last-b, have, want)
				}
			}
			if late && undone && before > 0.01 {
				change := int(math.Round((d.runs - before) * lossRunsSlowWindow))
				wantC := countRuns(lost) - runsBefore
				if change != wantC {
					t.Errorf("seed %d late %d (back %d): runs change %d, brute force %d", seed, s, last-s, change, wantC)
				}
			}
			if d.fast < 0 || d.slow < 0 || d.runs < 0 || math.IsNaN(d.Loss()) {
				t.Fatalf("negative/NaN")
			}
		}
	}
}
