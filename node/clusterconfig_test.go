package node

import (
	"strings"
	"testing"

	"github.com/edgecache/edge/config"
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
		if err != nil {
			t.Fatalf("%s: %v", c.yaml, err)
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
