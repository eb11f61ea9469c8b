//go:build !linux

package main

import "syscall"

// demoChildAttr: outside Linux there is no parent-death signal; the demo
// still stops its processes on Ctrl-C, SIGTERM and SIGHUP.
func demoChildAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }

// sweepDeadDemos: outside Linux a killed demo's temporary files stay.
func sweepDeadDemos(string) []string { return nil }
