package main

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/edgecache/edge/config"
	"github.com/edgecache/edge/fdetect"
	"github.com/edgecache/edge/lab/fdlab"
)

// TestFDSweepPrintsWhatANodeRuns: the YAML fd sweep prints, pasted into a
// node's config, builds the detector the sweep replayed, so it gives the
// P_A and T_D the sweep reported. Two reviews found ways it did not: the
// knob alone left out loss_model=2 (P_A 0.99552 where 0.999 was swept),
// and the whole line left the node's loss-aware margin on, which the
// replay had not run (T_D 255 ms where 98 was swept).
func TestFDSweepPrintsWhatANodeRuns(t *testing.T) {
	trace := filepath.Join(t.TempDir(), "hb.csv")
	if out, err := runCmd(fdGenCmd(), "--duration", "5m", "--links", "2", "--seed", "3", "--out", trace); err != nil {
		t.Fatalf("fd gen: %v\n%s", err, out)
	}
	as, err := loadArrivals(trace)
	if err != nil {
		t.Fatal(err)
	}
	const period = int64(100 * time.Millisecond)
	for _, c := range []struct {
		name   string
		args   []string
		metric fdlab.Metric
		added  string
	}{
		{"ml by the seed's metric", []string{"--detector", "ml"}, fdlab.MetricSeed, "loss_model=2"},
		{"ml by Chen's metric", []string{"--detector", "ml", "--metric", "chen"}, fdlab.MetricChen, "time_objective=1"},
		{"chen", []string{"--detector", "chen"}, fdlab.MetricSeed, ""},
		{"ml with the node's margin", []string{"--detector", "ml", "--param", "loss_budget=2.5e-6", "--target-pa", "0.99"}, fdlab.MetricSeed, ""},
		// The node's own cluster.loss_estimator must not replace the
		// replay's (a third review: P_A 0.99774 where 0.99824 was swept).
		{"chen with a budget, on a node with the runs estimator", []string{"--detector", "chen", "--param", "loss_budget=2.5e-6", "--target-pa", "0.998"}, fdlab.MetricSeed, ""},
	} {
		args := append([]string{"--trace", trace, "--target-pa", "0.999"}, c.args...)
		out, err := runCmd(fdSweepCmd(), args...)
		if err != nil {
			t.Fatalf("%s: fd sweep: %v\n%s", c.name, err, out)
		}
		var res fdlab.SweepResult
		jsonOut, err := runCmd(fdSweepCmd(), append(args, "--json")...)
		if err != nil {
			t.Fatalf("%s: fd sweep --json: %v", c.name, err)
		}
		if err := json.Unmarshal([]byte(jsonOut), &res); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		_, snippet, ok := strings.Cut(out, "    cluster:\n")
		if !ok {
			t.Fatalf("%s: no config to paste in:\n%s", c.name, out)
		}
		yaml := "origin: {url: 'http://127.0.0.1:1'}\ncluster:\n  loss_estimator: runs\n  loss_budget: 1e-5\n"
		for line := range strings.Lines(snippet) {
			if !strings.HasPrefix(line, "      ") {
				break
			}
			yaml += line[4:]
		}
		cfg, err := config.LoadBytes([]byte(yaml))
		if err != nil {
			t.Fatalf("%s: the printed config does not load: %v\n%s", c.name, err, yaml)
		}
		params, err := cfg.DetectorParams()
		if err != nil {
			t.Fatal(err)
		}
		r, err := fdlab.Replay(as, period, func() (fdetect.Detector, error) { return fdetect.New(cfg.Cluster.Detector, period, params) })
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		pa, td := r.Overall.QoS(c.metric)
		if pa != res.PA || td != res.TDms {
			t.Errorf("%s: the node's detector replays to P_A %.5f, T_D %.1f ms; the sweep reported %.5f, %.1f ms\n%s", c.name, pa, td, res.PA, res.TDms, yaml)
		}
		if c.added != "" && !strings.Contains(out, "the sweep set "+c.added) {
			t.Errorf("%s: output does not say the sweep added %s:\n%s", c.name, c.added, out)
		}
		if c.added == "" && strings.Contains(out, "the sweep set") {
			t.Errorf("%s: output names an addition the sweep did not make:\n%s", c.name, out)
		}
	}
}

// TestFDSweepSaysWhenTheKnobDoesNothing: where another parameter sets the
// whole margin (here a 3 s pause floor; a review met it with the loss
// budget on a lossier trace), every value of the knob meets the target,
// and the sweep says so rather than presenting the search's floor as a
// choice. A target beyond reach gives nothing to copy.
func TestFDSweepSaysWhenTheKnobDoesNothing(t *testing.T) {
	trace := filepath.Join(t.TempDir(), "hb.csv")
	if out, err := runCmd(fdGenCmd(), "--duration", "5m", "--links", "2", "--seed", "3", "--out", trace); err != nil {
		t.Fatalf("fd gen: %v\n%s", err, out)
	}
	out, err := runCmd(fdSweepCmd(), "--trace", trace, "--detector", "ml", "--target-pa", "0.99", "--knob", "quantile", "--param", "time_objective=1", "--param", "pause_ms=3000")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "every quantile tried met the target") {
		t.Errorf("no warning that the knob sets nothing:\n%s", out)
	}
	out, err = runCmd(fdSweepCmd(), "--trace", trace, "--detector", "phi", "--target-pa", "0.9999999")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "no setting to copy") || strings.Contains(out, "detector_params:") {
		t.Errorf("an unreached target offered a setting to copy:\n%s", out)
	}
}

func TestParamsStringRoundTrips(t *testing.T) {
	p := fdetect.Params{"quantile": 0.9998128602936442, "loss_model": 2, "pause_ms": 1428.1440060585737}
	s := p.String()
	if s != "loss_model=2,pause_ms=1428.1440060585737,quantile=0.9998128602936442" {
		t.Errorf("String = %q: want sorted name=value pairs, exact", s)
	}
	back, err := fdetect.ParseParams(strings.Split(s, ","))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range p {
		if back[k] != v {
			t.Errorf("%s: %v after the round trip, want %v", k, back[k], v)
		}
	}
	if got := (fdetect.Params{}).String(); got != "" {
		t.Errorf("empty params = %q", got)
	}
}

// TestFDReplaySaysWhenNothingWasMeasured: a window with no arrivals, or a
// trace shorter than the warm-up, is an error, not a row of zeros that
// reads like a detector missing every target.
func TestFDReplaySaysWhenNothingWasMeasured(t *testing.T) {
	trace := filepath.Join(t.TempDir(), "hb.csv")
	if out, err := runCmd(fdGenCmd(), "--duration", "1m", "--links", "1", "--seed", "3", "--out", trace); err != nil {
		t.Fatalf("fd gen: %v\n%s", err, out)
	}
	if out, err := runCmd(fdReplayCmd(), "--trace", trace, "--detector", "chen", "--from-ns", "1", "--to-ns", "2"); err == nil || !strings.Contains(err.Error(), "no heartbeat") {
		t.Errorf("an empty window: %v\n%s", err, out)
	}
	short := filepath.Join(t.TempDir(), "short.csv")
	if out, err := runCmd(fdGenCmd(), "--duration", "30s", "--links", "1", "--seed", "3", "--out", short); err != nil {
		t.Fatalf("fd gen: %v\n%s", err, out)
	}
	if out, err := runCmd(fdReplayCmd(), "--trace", short, "--detector", "chen"); err == nil || !strings.Contains(err.Error(), "warm-up") {
		t.Errorf("a trace within the warm-up: %v\n%s", err, out)
	}
}
