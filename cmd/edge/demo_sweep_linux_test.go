package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
	"testing"
)

// A demo killed outright leaves its disk directory and rules file; the
// next demo removes them, and nothing of a demo still running: its own
// files, a live process's, or a directory whose disk tier a node holds.
func TestDemoSweepsWhatAKilledDemoLeft(t *testing.T) {
	dir := t.TempDir()
	gone := exec.Command("true")
	if err := gone.Run(); err != nil {
		t.Fatal(err)
	}
	dead := strconv.Itoa(gone.Process.Pid)
	mk := func(name string, lockedSub bool) string {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Join(p, "edge-1"), 0o755); err != nil {
			t.Fatal(err)
		}
		f, err := os.OpenFile(filepath.Join(p, "edge-1", "lock"), os.O_RDWR|os.O_CREATE, 0o600)
		if err != nil {
			t.Fatal(err)
		}
		if lockedSub {
			if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = f.Close() })
		} else {
			_ = f.Close()
		}
		return p
	}
	orphan := mk("edge-demo-disk-"+dead+"-111", false)
	held := mk("edge-demo-disk-"+dead+"-222", true) // a node of it still runs (another pid namespace)
	mine := mk("edge-demo-disk-"+strconv.Itoa(os.Getpid())+"-333", false)
	live := mk("edge-demo-disk-1-444", false)
	other := mk("edge-demo-diskette-"+dead+"-555", false)
	rules := filepath.Join(dir, "edge-demo-rules-"+dead+"-666.yaml")
	oldStyle := filepath.Join(dir, "edge-demo-rules-777.yaml") // no process id: not ours to judge
	for _, f := range []string{rules, oldStyle} {
		if err := os.WriteFile(f, []byte("sites: []\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	removed := sweepDeadDemos(dir)
	slices.Sort(removed)
	if want := []string{orphan, rules}; !slices.Equal(removed, want) {
		t.Fatalf("removed %q, want %q", removed, want)
	}
	for _, p := range []string{held, mine, live, other, oldStyle} {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("%s was removed: %v", p, err)
		}
	}
	for _, p := range []string{orphan, rules} {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("%s is still there", p)
		}
	}
}

func TestDemoTempOwner(t *testing.T) {
	for name, want := range map[string]int{
		"edge-demo-disk-42-abc":                 42,
		"edge-demo-rules-7-x.yaml":              7,
		"edge-demo-disk-abc":                    0,
		"edge-demo-rules-123.yaml":              0, // before process ids were in the name
		"edge-demo-disk--1-x":                   0,
		"edge-demo-disk-0-x":                    0,
		"edge-demo-disk-99999999999999999999-x": 0,
		"other-42-x":                            0,
	} {
		if got, ok := demoTempOwner(name); got != want || ok != (want > 0) {
			t.Errorf("%q: %d %v, want %d", name, got, ok, want)
		}
	}
	if pid, ok := demoTempOwner(demoTempPrefix("disk") + "xyz"); !ok || pid != os.Getpid() {
		t.Errorf("demoTempPrefix's own name reads as %d %v", pid, ok)
	}
}
