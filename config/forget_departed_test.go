package config

import (
	"os"
	"strings"
	"testing"
	"time"
)

// TestForgetDepartedAfterKey (a review's): default, env override, and every malformed
// value stops loading with the key named.
func TestForgetDepartedAfterKey(t *testing.T) {
	c, err := LoadBytes([]byte("origin: {url: http://o}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if c.Cluster.ForgetDeparted != 10*time.Minute {
		t.Errorf("default %v, want 10m", c.Cluster.ForgetDeparted)
	}
	for _, v := range []string{"-1s", "0", "10", "0s", "soon", "''", "1d", "30s"} {
		_, err := LoadBytes([]byte("origin: {url: http://o}\ncluster: {forget_departed_after: " + v + "}\n"))
		if err == nil || !strings.Contains(err.Error(), "cluster.forget_departed_after") {
			t.Errorf("%s: err %v, want one naming cluster.forget_departed_after", v, err)
		}
	}
	os.Setenv("EDGE_CLUSTER_FORGET_DEPARTED_AFTER", "-5m")
	defer os.Unsetenv("EDGE_CLUSTER_FORGET_DEPARTED_AFTER")
	os.Setenv("EDGE_ORIGIN_URL", "http://o")
	defer os.Unsetenv("EDGE_ORIGIN_URL")
	v, err := NewViper("")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Load(v); err == nil || !strings.Contains(err.Error(), "cluster.forget_departed_after") {
		t.Errorf("env -5m: err %v", err)
	}
}
