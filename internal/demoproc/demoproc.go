// Package demoproc starts an `edge demo` cluster for the measurement
// scripts (scripts/benchcluster, clusteroverhead, peerlatency) and names
// its nodes' addresses, which `edge demo` fixes:
// node i (1-based) answers on 8079+i (public) and 9179+i (admin).
package demoproc

import (
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
)

// Cluster is a running `edge demo`.
type Cluster struct {
	cmd *exec.Cmd
	n   int
}

// Start runs `bin demo --nodes n --disk-root ""` (every run starts cold)
// with extra demo arguments, and serveArgs (plus --log-level warn, unless
// serveArgs sets a level) for every node.
func Start(bin string, n int, serveArgs string, extra ...string) (*Cluster, error) {
	if !strings.Contains(serveArgs, "--log-level") {
		serveArgs = strings.TrimSpace("--log-level warn " + serveArgs)
	}
	args := append([]string{"demo", "--nodes", strconv.Itoa(n), "--disk-root", ""}, extra...)
	args = append(args, "--serve-args", serveArgs)
	cmd := exec.Command(bin, args...)
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("demoproc: %w", err)
	}
	return &Cluster{cmd: cmd, n: n}, nil
}

// Stop ends the demo, which stops every node it started.
func (c *Cluster) Stop() {
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	_ = c.cmd.Wait()
}

// Admin is node i's admin address (host:port), i from 1.
func (c *Cluster) Admin(i int) string { return "127.0.0.1:" + strconv.Itoa(9179+i) }

// Public is node i's public base URL, i from 1.
func (c *Cluster) Public(i int) string { return "http://127.0.0.1:" + strconv.Itoa(8079+i) }

// Admins lists every node's admin address.
func (c *Cluster) Admins() []string { return c.each(c.Admin) }

// Publics lists every node's public base URL.
func (c *Cluster) Publics() []string { return c.each(c.Public) }

func (c *Cluster) each(f func(int) string) []string {
	out := make([]string, 0, c.n)
	for i := 1; i <= c.n; i++ {
		out = append(out, f(i))
	}
	return out
}
