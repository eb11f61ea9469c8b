// Package fdlab is the failure-detection lab behind `edge fd`: heartbeat
// trace generation, reading and writing, replay of detectors over traces
// with the field's metrics (T_D, P_A, mistake rate), parameter sweeps, and
// ml-seed, the seed paper's LSTM detector, which a node never runs (it
// costs tens of milliseconds per heartbeat). A node runs only package
// fdetect.
package fdlab

import (
	"fmt"
	"strings"

	"github.com/edgecache/edge/fdetect"
)

// Names lists the detectors New builds: the runtime ones and ml-seed.
var Names = append(append([]string(nil), fdetect.Names...), "ml-seed")

// seedParams are ml-seed's parameters.
var seedParams = []string{"eta", "batch", "epochs", "epsilon", "seq", "hidden", "early_penalty", "retrain_every", "lr"}

// New builds a detector by name: ml-seed here, every other from fdetect.
// The seed's detector has no knob that trades P_A for T_D (its margin is
// the mean of recent errors); it is compared at its own operating point.
func New(name string, period int64, p fdetect.Params) (fdetect.Detector, error) {
	if name != "ml-seed" {
		return fdetect.New(name, period, p)
	}
	for k := range p {
		known := false
		for _, s := range seedParams {
			known = known || k == s
		}
		if !known {
			return nil, fmt.Errorf("fdlab: ml-seed has no parameter %q (it has %s)", k, strings.Join(seedParams, ", "))
		}
	}
	if period <= 0 {
		return nil, fmt.Errorf("fdlab: period must be positive")
	}
	d := DefaultSeedConfig()
	get := p.Get
	return NewMLSeed(period, SeedConfig{
		Eta: int(get("eta", float64(d.Eta))), Batch: int(get("batch", float64(d.Batch))), Epochs: int(get("epochs", float64(d.Epochs))),
		Epsilon: int(get("epsilon", float64(d.Epsilon))), Seq: int(get("seq", float64(d.Seq))), Hidden: int(get("hidden", float64(d.Hidden))),
		EarlyPenalty: get("early_penalty", d.EarlyPenalty), RetrainEvery: int(get("retrain_every", float64(d.RetrainEvery))),
		LearningRate: get("lr", d.LearningRate),
	}), nil
}
