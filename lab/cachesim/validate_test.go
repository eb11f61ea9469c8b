package cachesim

import (
	"math"
	"testing"
)

// TestValidateRefusesWhatNoSimulationMeans: NaN, ±Inf and absurd sizes
// once went through Validate into Simulate (a panic for bpe and miss
// penalty NaN, tables of +Inf and NaN for an infinite cost, a chance of 7).
func TestValidateRefusesWhatNoSimulationMeans(t *testing.T) {
	base := Config{Caches: 3, CacheSize: 100, BPE: 14, UpdateInterval: 10, Costs: []float64{1, 2, 3}, MissPenalty: 100, Replicas: 1, Clients: 1}
	if err := base.Validate(); err != nil {
		t.Fatalf("the base config: %v", err)
	}
	nan, inf := math.NaN(), math.Inf(1)
	cases := map[string]func(c *Config){
		"bpe NaN":          func(c *Config) { c.BPE = nan },
		"bpe +Inf":         func(c *Config) { c.BPE = inf },
		"bpe 1e12":         func(c *Config) { c.BPE = 1e12 },
		"miss penalty NaN": func(c *Config) { c.MissPenalty = nan },
		"miss penalty Inf": func(c *Config) { c.MissPenalty = inf },
		"cost +Inf":        func(c *Config) { c.Costs = []float64{1, 2, inf} },
		"cost NaN":         func(c *Config) { c.Costs = []float64{1, nan, 3} },
		"explore -5":       func(c *Config) { c.Explore = -5 },
		"explore NaN":      func(c *Config) { c.Explore = nan },
		"explore 7":        func(c *Config) { c.Explore = 7 },
	}
	for name, mod := range cases {
		c := base
		c.Costs = append([]float64(nil), base.Costs...)
		mod(&c)
		if err := c.Validate(); err == nil {
			t.Errorf("%s: Validate accepts it", name)
		}
	}
}
