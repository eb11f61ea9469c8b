package main

import (
	"slices"
	"testing"
)

// TestDemoNodeEnvSharesTheCores: each demo node gets its share of the
// host's cores, at least one, and a GOMAXPROCS the user set is kept.
func TestDemoNodeEnvSharesTheCores(t *testing.T) {
	base := []string{"PATH=/bin", "HOME=/root"}
	for _, c := range []struct {
		cores, nodes int
		want         string
	}{{2, 3, "GOMAXPROCS=1"}, {8, 3, "GOMAXPROCS=2"}, {16, 1, "GOMAXPROCS=16"}, {1, 5, "GOMAXPROCS=1"}, {4, 0, "GOMAXPROCS=4"}} {
		env := demoNodeEnv(base, c.cores, c.nodes)
		if !slices.Contains(env, c.want) || !slices.Contains(env, "PATH=/bin") {
			t.Errorf("%d cores, %d nodes: %v, want %s beside the rest", c.cores, c.nodes, env, c.want)
		}
	}
	if len(base) != 2 {
		t.Fatal("demoNodeEnv changed its argument")
	}
	own := []string{"GOMAXPROCS=7", "PATH=/bin"}
	if env := demoNodeEnv(own, 2, 3); !slices.Equal(env, own) {
		t.Errorf("the user's GOMAXPROCS replaced: %v", env)
	}
	// What the runtime ignores is not the user's choice: the share replaces it.
	for _, v := range []string{"", "0", "-1", "abc", "1.5"} {
		env := demoNodeEnv([]string{"GOMAXPROCS=" + v, "PATH=/bin"}, 2, 3)
		if !slices.Equal(env, []string{"PATH=/bin", "GOMAXPROCS=1"}) {
			t.Errorf("GOMAXPROCS=%q, which the runtime ignores: %v, want the share alone", v, env)
		}
	}
}
