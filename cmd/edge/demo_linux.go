package main

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// demoChildAttr keeps a demo process tied to the demo: in a process group
// of its own, so that the terminal's signals (Ctrl-C, and the SIGHUP of a
// closed terminal, which an edge node takes for "reload") reach the demo
// alone, which stops its processes in order; and sent SIGTERM by the
// kernel if the demo dies without stopping them (SIGKILL), so that no node
// is left holding the demo's ports for the next run to talk to.
func demoChildAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
}

// sweepDeadDemos removes what a demo killed outright (SIGKILL, an OOM
// kill: nothing of it ran to remove them) left in dir: its disk tiers'
// directory and its rules file, both named after the demo's process id
// (demoTempPrefix). One is removed only when that process is gone and no
// disk tier in it is locked by a running node (a process id from another
// namespace sharing the directory reads as gone; its nodes' locks do not).
// It returns what it removed.
func sweepDeadDemos(dir string) []string {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	var removed []string
	for _, e := range entries {
		pid, ok := demoTempOwner(e.Name())
		if !ok || pid == os.Getpid() || syscall.Kill(pid, 0) != syscall.ESRCH {
			continue
		}
		path := filepath.Join(dir, e.Name())
		if e.IsDir() && diskTierLocked(path) {
			continue
		}
		if os.RemoveAll(path) == nil {
			removed = append(removed, path)
		}
	}
	return removed
}

// diskTierLocked reports whether a running node holds a lock under root:
// a disk tier's (DIR/v1/lock) or a cluster state directory's, each a
// file named "lock" under flock, found wherever it is below root (the
// disk layout's version directory is the tier's to name). Links are not
// followed and the files are opened read-only: the directory may hold
// anything a killed demo's nodes, or someone else, left there.
func diskTierLocked(root string) bool {
	locked := false
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err // unreadable: leave the whole directory
		}
		if d.IsDir() && strings.Count(strings.TrimPrefix(path, root), string(filepath.Separator)) > 3 {
			return filepath.SkipDir // deeper than any lock the nodes keep
		}
		if d.Name() != "lock" || !d.Type().IsRegular() {
			return nil
		}
		f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
		if err != nil {
			return err
		}
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		_ = f.Close() // closing releases a lock taken here
		if err != nil {
			locked = true
			return fs.SkipAll
		}
		return nil
	})
	return locked || err != nil
}
