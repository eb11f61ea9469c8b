package main

import "syscall"

// demoChildAttr keeps a demo process tied to the demo: in a process group
// of its own, so that the terminal's signals (Ctrl-C, and the SIGHUP of a
// closed terminal, which an edge node takes for "reload") reach the demo
// alone, which stops its processes in order; and sent SIGTERM by the
// kernel if the demo dies without stopping them (SIGKILL), so that no node
// is left holding the demo's ports for the next run to talk to.
func demoChildAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
}
