package main

import (
	"os"
	"path/filepath"
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

// diskTierLocked reports whether a running node holds the disk tier lock
// of a directory under root (disk.Tier's "lock" file, under flock).
func diskTierLocked(root string) bool {
	subs, err := os.ReadDir(root)
	if err != nil {
		return true // unreadable: leave it
	}
	for _, s := range subs {
		f, err := os.OpenFile(filepath.Join(root, s.Name(), "lock"), os.O_RDWR, 0)
		if err != nil {
			continue
		}
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		_ = f.Close() // closing releases a lock taken here
		if err != nil {
			return true
		}
	}
	return false
}
