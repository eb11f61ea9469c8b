package config

import (
	"fmt"
	"strings"
	"testing"
)

// TestDetectorParamsOutOfRangeStopStartup: a detector parameter out of its
// range (window=1e18 once panicked here, in config check and at startup)
// or given twice is an error naming cluster.detector_params, for the
// node's detector and for a shadow.
func TestDetectorParamsOutOfRangeStopStartup(t *testing.T) {
	cases := []struct{ detector, params string }{
		{"chen", "window=1e18"}, {"chen", "window=-5"}, {"chen", "window=1e30"}, {"chen", "window=0.5"},
		{"chen", "alpha_ms=-1000"}, {"chen", "alpha_ms=1e13"}, {"phi", "threshold=-1"},
		{"ml", "quantile=1.5"}, {"ml", "quantile=0"}, {"ml", "lr=-1"}, {"ml", "order=-3"},
		{"ml", "quantile=0.9,quantile=0.99"}, {"bertier", "gamma=-5"},
	}
	for _, tc := range cases {
		y := fmt.Sprintf("origin:\n  url: http://o:80\ncluster:\n  detector: %s\n  detector_params: %q\n", tc.detector, tc.params)
		_, err := LoadBytes([]byte(y))
		switch {
		case err == nil:
			t.Errorf("%s %s: accepted", tc.detector, tc.params)
		case !strings.Contains(err.Error(), "cluster.detector_params"):
			t.Errorf("%s %s: error does not name the key: %v", tc.detector, tc.params, err)
		}
	}
	y := "origin:\n  url: http://o:80\ncluster:\n  shadow_detectors: [\"chen/window=1e18\"]\n"
	if _, err := LoadBytes([]byte(y)); err == nil || !strings.Contains(err.Error(), "cluster.shadow_detectors") {
		t.Errorf("a shadow with window=1e18: %v", err)
	}
}

// TestHeartbeatPeriodBounds: 1ns would be a busy loop of packets per peer,
// 10000h a detector that never detects.
func TestHeartbeatPeriodBounds(t *testing.T) {
	for _, d := range []string{"1ns", "1us", "999us", "61s", "10000h"} {
		y := "origin:\n  url: http://o:80\ncluster:\n  heartbeat_period: " + d + "\n"
		if _, err := LoadBytes([]byte(y)); err == nil || !strings.Contains(err.Error(), "cluster.heartbeat_period") {
			t.Errorf("heartbeat_period %s: %v", d, err)
		}
	}
	for _, d := range []string{"1ms", "100ms", "1m"} {
		y := "origin:\n  url: http://o:80\ncluster:\n  heartbeat_period: " + d + "\n"
		if _, err := LoadBytes([]byte(y)); err != nil {
			t.Errorf("heartbeat_period %s: %v", d, err)
		}
	}
}

// TestOneErrorPerKeyAndABoundedMessage: a list where a choice is wanted
// is one error naming the key (not a second about the empty choice), and
// a file of thousands of unknown keys gives a message of 20 lines and a
// count, not thousands.
func TestOneErrorPerKeyAndABoundedMessage(t *testing.T) {
	_, err := LoadBytes([]byte("origin:\n  url: http://o:80\ncluster:\n  selection: [fno]\n"))
	if err == nil || strings.Count(err.Error(), "cluster.selection") != 1 || strings.Contains(err.Error(), "errors:") {
		t.Errorf("selection: [fno]: %v, want one error naming cluster.selection", err)
	}
	var b strings.Builder
	b.WriteString("origin:\n  url: http://o:80\n")
	for i := range 500 {
		fmt.Fprintf(&b, "unknown_%d: 1\n", i)
	}
	_, err = LoadBytes([]byte(b.String()))
	if err == nil || !strings.Contains(err.Error(), "500 errors") || !strings.Contains(err.Error(), "and 480 more") || strings.Count(err.Error(), "\n") > 25 {
		t.Errorf("500 unknown keys: a message of %d lines: %.200q", strings.Count(fmt.Sprint(err), "\n"), fmt.Sprint(err))
	}
}
