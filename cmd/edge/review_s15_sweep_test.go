//go:build linux

package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/edgecache/edge/disk"
)

func s15DeadPid(t *testing.T) string {
	t.Helper()
	gone := exec.Command("true")
	if err := gone.Run(); err != nil {
		t.Fatal(err)
	}
	return strconv.Itoa(gone.Process.Pid)
}

// Found by a review, now mended (diskTierLocked finds any lock file below
// the directory): diskTierLocked looked for the tier's lock at <dir>/<sub>/lock, but
// a disk tier (disk.Open, Tier.lock) locks <Dir>/v1/lock, and the demo
// gives each node --disk-path <dir>/edge-i, so a real node's lock sits at
// <dir>/edge-i/v1/lock and is never seen. A dead demo's directory whose
// tier a node still holds (the case the doc comment names: a node in
// another pid namespace, or one still shutting down after the demo's
// SIGKILL) is deleted under the running node. The existing test fakes the
// lock at edge-1/lock, the layout no node uses.
func TestS15SweepSeesARealDiskTierLock(t *testing.T) {
	dir := t.TempDir()
	held := filepath.Join(dir, "edge-demo-disk-"+s15DeadPid(t)+"-1")
	tier, err := disk.Open(disk.Options{Dir: filepath.Join(held, "edge-1"), MaxBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tier.Close(context.Background()) })
	removed := sweepDeadDemos(dir)
	if _, err := os.Stat(held); err != nil {
		t.Errorf("a directory whose disk tier a running node holds was removed (%q): %v", removed, err)
	}
}

// HOLDS: a name that matches the pattern with a dead pid but is a symlink
// (to a directory, to a file) removes the link only, never the target or
// its contents; a pid that wraps to this process's own (kill(2) takes a
// 32-bit pid_t) or to -1 is read as alive and kept; a matching regular file
// and an unlocked directory of a dead pid are removed.
func TestS15SweepSymlinksAndCraftedNamesHold(t *testing.T) {
	dir := t.TempDir()
	elsewhere := t.TempDir()
	dead := s15DeadPid(t)
	target := filepath.Join(elsewhere, "precious")
	if err := os.MkdirAll(filepath.Join(target, "edge-1"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(target, "edge-1", "data"), []byte("keep"), 0o600); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(elsewhere, "file.yaml")
	if err := os.WriteFile(file, []byte("keep"), 0o600); err != nil {
		t.Fatal(err)
	}
	linkDir := filepath.Join(dir, "edge-demo-disk-"+dead+"-link")
	linkFile := filepath.Join(dir, "edge-demo-rules-"+dead+"-link.yaml")
	if err := os.Symlink(target, linkDir); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(file, linkFile); err != nil {
		t.Fatal(err)
	}
	// A real dead demo dir whose edge-1 is a symlink to elsewhere.
	inner := filepath.Join(dir, "edge-demo-disk-"+dead+"-inner")
	if err := os.MkdirAll(inner, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, filepath.Join(inner, "edge-1")); err != nil {
		t.Fatal(err)
	}
	self := filepath.Join(dir, "edge-demo-disk-"+strconv.FormatInt(1<<32+int64(os.Getpid()), 10)+"-wrap")
	minus1 := filepath.Join(dir, "edge-demo-disk-"+strconv.FormatInt(1<<32-1, 10)+"-wrap")
	for _, p := range []string{self, minus1} {
		if err := os.Mkdir(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	plain := filepath.Join(dir, "edge-demo-disk-"+dead+"-file")
	if err := os.WriteFile(plain, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	sweepDeadDemos(dir)
	for _, p := range []string{filepath.Join(target, "edge-1", "data"), file, self, minus1} {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("%s: %v", p, err)
		}
	}
	for _, p := range []string{linkDir, linkFile, inner, plain} {
		if _, err := os.Lstat(p); !os.IsNotExist(err) {
			t.Errorf("%s still there", p)
		}
	}
}
