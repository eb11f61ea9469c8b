package cachesim

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestSimulateSmall runs the simulator on a synthetic Zipf trace and checks
// the ordering the paper predicts: opt ≤ fna-home ≤ fno.
func TestSimulateSmall(t *testing.T) {
	rng := rand.New(rand.NewPCG(8, 9))
	keys := make([]uint64, 60000)
	for i := range keys {
		keys[i] = uint64(math.Floor(math.Pow(rng.Float64(), 3) * 20000))
	}
	res, err := Simulate(keys, Config{Caches: 3, CacheSize: 1000, BPE: 14, UpdateInterval: 500, Costs: []float64{1, 2, 3}, MissPenalty: 100, Replicas: 1, Seed: 1}, []string{"opt", "fno", "fna", "fna-home"})
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]Result{}
	for _, r := range res {
		byName[r.Policy] = r
	}
	if byName["opt"].CostVsOpt != 1 || byName["fna-home"].CostPerRequest > byName["fno"].CostPerRequest || byName["opt"].CostPerRequest > byName["fna-home"].CostPerRequest {
		t.Errorf("ordering: %+v", byName)
	}
	if byName["fno"].FNRatio <= 0 {
		t.Error("stale indicators produced no false negatives")
	}
}
