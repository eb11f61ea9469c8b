package node

import (
	"strings"
	"testing"

	"github.com/edgecache/edge/config"
	"github.com/edgecache/edge/fdetect"
)

// TestClusterConfigNamesTheDetectorKey: a bad detector parameter or shadow
// detector stops startup with the key and the reason; a good shadow list
// reaches the cluster with the node's loss budget.
func TestClusterConfigNamesTheDetectorKey(t *testing.T) {
	base := "origin: {url: 'http://127.0.0.1:1'}\ncluster: {listen: '127.0.0.1:0', secret: 'a-secret-of-16-bytes', peers: 'b=127.0.0.1:1', "
	for _, c := range []struct{ yaml, key string }{
		{"detector_params: 'quantile'", "cluster.detector_params"},
		{"shadow_detectors: 'phi,nope'", "cluster.shadow_detectors"},
		{"shadow_detectors: 'chen/alpah_ms=3'", "cluster.shadow_detectors"},
		{"shadow_detectors: 'phi,chen,phi'", "cluster.shadow_detectors"},
	} {
		cfg, err := config.LoadBytes([]byte(base + c.yaml + "}\n"))
		if err != nil { // config checks parameters and names since 2026-12-04
			if !strings.Contains(err.Error(), c.key) {
				t.Errorf("%s: %v, want an error naming %s", c.yaml, err, c.key)
			}
			continue
		}
		if _, _, err := clusterConfig(cfg); err == nil || !strings.Contains(err.Error(), c.key) {
			t.Errorf("%s: %v, want an error naming %s", c.yaml, err, c.key)
		}
	}
	cfg, err := config.LoadBytes([]byte(base + "shadow_detectors: 'phi,chen/alpha_ms=300'}\n"))
	if err != nil {
		t.Fatal(err)
	}
	cc, _, err := clusterConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if len(cc.Shadows) != 2 || cc.Shadows[1].Kind != "chen" || cc.Shadows[1].Args["alpha_ms"] != 300 || cc.Shadows[0].Args["loss_budget"] != cfg.Cluster.LossBudget {
		t.Fatalf("shadows %+v", cc.Shadows)
	}
}

// TestLossEstimatorReachesEveryDetector: cluster.loss_estimator is added
// to the node's detector and to each shadow beside cluster.loss_budget,
// unless an entry sets its own; a bad value stops startup naming the key.
func TestLossEstimatorReachesEveryDetector(t *testing.T) {
	base := "origin: {url: 'http://127.0.0.1:1'}\ncluster: {listen: '127.0.0.1:0', secret: 'a-secret-of-16-bytes', peers: 'b=127.0.0.1:1', "
	if _, err := config.LoadBytes([]byte(base + "loss_estimator: 'bursts'}\n")); err == nil || !strings.Contains(err.Error(), "cluster.loss_estimator") {
		t.Fatalf("loss_estimator bursts: %v, want an error naming cluster.loss_estimator", err)
	}
	for _, c := range []struct {
		yaml       string
		own, chen  float64 // loss_estimator the node's detector and the chen shadow get
		chenBudget float64
	}{
		{"shadow_detectors: 'chen'}", float64(fdetect.LossRate), float64(fdetect.LossRate), fdetect.DefaultLossBudget},
		{"loss_estimator: 'runs', shadow_detectors: 'chen'}", float64(fdetect.LossRuns), float64(fdetect.LossRuns), fdetect.DefaultLossBudget},
		{"loss_estimator: 'runs', shadow_detectors: 'chen/loss_estimator=0'}", float64(fdetect.LossRuns), float64(fdetect.LossRate), fdetect.DefaultLossBudget},
		{"loss_budget: 0, shadow_detectors: 'chen/loss_estimator=1'}", -1, 1, 0},
		{"loss_budget: 0, detector_params: 'loss_estimator=1', shadow_detectors: 'chen'}", 1, -1, 0},
	} {
		cfg, err := config.LoadBytes([]byte(base + c.yaml + "\n"))
		if err != nil {
			t.Fatalf("%s: %v", c.yaml, err)
		}
		cc, _, err := clusterConfig(cfg)
		if err != nil {
			t.Fatalf("%s: %v", c.yaml, err)
		}
		get := func(p fdetect.Params, k string) float64 {
			if v, ok := p[k]; ok {
				return v
			}
			return -1
		}
		if got := get(cc.DetectorArgs, fdetect.LossEstimatorParam); got != c.own {
			t.Errorf("%s: the node's detector has loss_estimator %v, want %v", c.yaml, got, c.own)
		}
		if got := get(cc.Shadows[0].Args, fdetect.LossEstimatorParam); got != c.chen {
			t.Errorf("%s: the shadow has loss_estimator %v, want %v", c.yaml, got, c.chen)
		}
		if got := get(cc.Shadows[0].Args, fdetect.LossBudgetParam); got != c.chenBudget {
			t.Errorf("%s: the shadow has loss_budget %v, want %v", c.yaml, got, c.chenBudget)
		}
	}
}
