package main

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/edgecache/edge/fdetect"
	"github.com/edgecache/edge/lab/fdlab"
)

// TestFDSweepPrintsTheWholePoint: the line an operator copies into
// cluster.detector_params reaches the swept P_A on replay. Printing only the
// knob (what fd sweep did before) left out loss_model=2, which a node does
// not run by default, and the knob alone falls short of the target.
func TestFDSweepPrintsTheWholePoint(t *testing.T) {
	trace := filepath.Join(t.TempDir(), "hb.csv")
	if out, err := runCmd(fdGenCmd(), "--duration", "5m", "--links", "2", "--seed", "3", "--out", trace); err != nil {
		t.Fatalf("fd gen: %v\n%s", err, out)
	}
	const target = 0.999
	out, err := runCmd(fdSweepCmd(), "--trace", trace, "--detector", "ml", "--target-pa", "0.999")
	if err != nil {
		t.Fatalf("fd sweep: %v\n%s", err, out)
	}
	_, line, ok := strings.Cut(out, "cluster.detector_params: ")
	if !ok {
		t.Fatalf("no cluster.detector_params line in:\n%s", out)
	}
	line, _, _ = strings.Cut(line, "\n")
	if !strings.Contains(out, "the sweep set loss_model=2") {
		t.Errorf("output does not say the sweep added the loss model:\n%s", out)
	}
	printed, err := fdetect.ParseParams(strings.Split(line, ","))
	if err != nil {
		t.Fatalf("printed params %q do not parse: %v", line, err)
	}
	if printed["loss_model"] != float64(fdetect.LossModelPriced) {
		t.Fatalf("printed params %v lack loss_model=2", printed)
	}
	as, err := loadArrivals(trace)
	if err != nil {
		t.Fatal(err)
	}
	paOf := func(p fdetect.Params) float64 {
		r, err := fdlab.Replay(as, int64(100e6), func() (fdetect.Detector, error) { return fdetect.New("ml", int64(100e6), p) })
		if err != nil {
			t.Fatal(err)
		}
		pa, _ := r.Overall.QoS(fdlab.MetricSeed)
		return pa
	}
	if pa := paOf(printed); pa < target {
		t.Errorf("the printed point %s replays to P_A %.5f, below the target %g", line, pa, target)
	}
	knobOnly := fdetect.Params{"quantile": printed["quantile"]}
	t.Logf("printed point: P_A %.5f; its quantile alone (loss model off): %.5f", paOf(printed), paOf(knobOnly))
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
