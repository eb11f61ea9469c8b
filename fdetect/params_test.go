package fdetect

import (
	"strings"
	"testing"
)

// TestEveryParameterHasARange: a parameter without a range would refuse
// every value but 0; each default must lie inside its range.
func TestEveryParameterHasARange(t *testing.T) {
	for _, k := range kinds {
		for _, param := range k.params {
			if _, ok := paramRanges[param]; !ok {
				t.Errorf("%s's %s has no range in paramRanges", k.name, param)
			}
		}
		if _, err := New(k.name, 100e6, Params{}); err != nil {
			t.Errorf("%s with its defaults: %v", k.name, err)
		}
	}
	d := DefaultMLConfig()
	defaults := Params{"quantile": d.Quantile, "window": float64(d.Window), "order": float64(d.Order), "lr": d.LearningRate,
		"base_rate": d.BaseRate, "outage": d.OutagePeriods, "early_penalty": d.EarlyPenalty, "time_window": float64(d.TimeWindow)}
	if _, err := New("ml", 100e6, defaults); err != nil {
		t.Errorf("ml's defaults written out: %v", err)
	}
}

// TestParamsOutOfRangeAreRefused: values that once reached a detector
// unchecked (a panic, an overflow, a peer always suspected, a silent
// fallback to the defaults) are refused, naming the parameter.
func TestParamsOutOfRangeAreRefused(t *testing.T) {
	cases := []struct {
		detector string
		params   Params
	}{
		{"chen", Params{"window": 1e18}},
		{"chen", Params{"window": -5}},
		{"chen", Params{"window": 0.5}},
		{"chen", Params{"alpha_ms": -1000}},
		{"chen", Params{"alpha_ms": 1e13}},
		{"phi", Params{"threshold": -1}},
		{"phi", Params{"threshold": 0}},
		{"ml", Params{"quantile": 1.5}},
		{"ml", Params{"quantile": 1}},
		{"ml", Params{"quantile": 0}},
		{"ml", Params{"lr": -1}},
		{"ml", Params{"order": -3}},
		{"ml", Params{"time_objective": 2}},
		{"bertier", Params{"gamma": -5}},
		{"twowindows", Params{"short": 0}},
		{"ml", Params{"loss_budget": 1e-6, "window": 1e18}}, // inside the loss wrapper too
	}
	for _, c := range cases {
		_, err := New(c.detector, 100e6, c.params)
		if err == nil {
			t.Errorf("%s %v accepted", c.detector, c.params)
			continue
		}
		for name := range c.params {
			if name != LossBudgetParam && !strings.Contains(err.Error(), name) {
				t.Errorf("%s %v: %v does not name %s", c.detector, c.params, err, name)
			}
		}
	}
}

// TestParamGivenTwiceIsRefused: quantile=0.9,quantile=0.99 is a typo, not
// "the last one wins".
func TestParamGivenTwiceIsRefused(t *testing.T) {
	if _, err := ParseParams([]string{"quantile=0.9", "quantile=0.99"}); err == nil || !strings.Contains(err.Error(), "twice") {
		t.Errorf("a parameter given twice: %v", err)
	}
}
