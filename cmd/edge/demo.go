package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"
)

// demoRules are the demo's cache rules: the demo origin's pages carry
// their own caching headers, so these change what a visitor sees only for
// URLs with tracking parameters, which share the page's entry.
const demoRules = `rules:
  - {name: static, match: {path: /static/}, ttl: 1h, strip_cookies: true}
  - {name: pages, default_ttl: 1m, key: {ignore_params: [utm_*, fbclid, gclid]}}
`

// demoTempPrefix names a demo's temporary files of a kind ("disk",
// "rules") after its process, so that a later demo can tell whether their
// owner is gone (sweepDeadDemos): edge-demo-disk-PID-….
func demoTempPrefix(kind string) string {
	return "edge-demo-" + kind + "-" + strconv.Itoa(os.Getpid()) + "-"
}

// demoTempOwner reads the process id from a name demoTempPrefix made.
func demoTempOwner(name string) (int, bool) {
	for _, kind := range [...]string{"disk", "rules"} {
		rest, ok := strings.CutPrefix(name, "edge-demo-"+kind+"-")
		if !ok {
			continue
		}
		digits, _, ok := strings.Cut(rest, "-")
		if pid, err := strconv.Atoi(digits); ok && err == nil && pid > 0 {
			return pid, true
		}
	}
	return 0, false
}

func demoCmd() *cobra.Command {
	var originAddr, token, secret, extra, diskRoot string
	var nodes, publicPort, adminPort, clusterPort int
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Run the demo origin and a cluster of edge nodes in front of it, as separate processes",
		Long: `Run the demo origin and N edge nodes as separate processes on 127.0.0.1.
Node i (1-based) listens on 8079+i (public), 9179+i (admin) and 7945+i (cluster); --public-port,
--admin-port and --cluster-port move those ranges (node 1's port, the next nodes' following it).
Each run starts cold, with disk tiers in a fresh temporary directory removed at exit (and what a
demo killed outright left there removed by the next), so that the README's walk-through prints
what it says every time; --disk-root DIR keeps them in
DIR/edge-i across runs (a restarted demo serves what it had stored), --disk-root "" runs from RAM.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if nodes < 1 || nodes > 50 {
				return usageError{fmt.Errorf("--nodes %d: want 1..50", nodes)}
			}
			for _, path := range sweepDeadDemos(os.TempDir()) {
				fmt.Fprintf(cmd.ErrOrStderr(), "removed %s, left by a demo that was killed\n", path)
			}
			if !cmd.Flags().Changed("disk-root") {
				fresh, err := os.MkdirTemp("", demoTempPrefix("disk")+"*")
				if err != nil {
					return fmt.Errorf("demo: %w", err)
				}
				defer func() { _ = os.RemoveAll(fresh) }()
				diskRoot = fresh
			}
			for _, r := range []struct {
				flag  string
				first int
			}{{"--public-port", publicPort}, {"--admin-port", adminPort}, {"--cluster-port", clusterPort}} {
				if r.first < 1 || r.first+nodes-1 > 65535 {
					return usageError{fmt.Errorf("%s %d: want a port from 1 to %d for %d nodes", r.flag, r.first, 65536-nodes, nodes)}
				}
			}
			inRange := func(port int) bool {
				return port >= publicPort && port < publicPort+nodes || port >= adminPort && port < adminPort+nodes || port >= clusterPort && port < clusterPort+nodes
			}
			if publicPort < adminPort+nodes && adminPort < publicPort+nodes || publicPort < clusterPort+nodes && clusterPort < publicPort+nodes || adminPort < clusterPort+nodes && clusterPort < adminPort+nodes {
				return usageError{fmt.Errorf("--public-port %d, --admin-port %d, --cluster-port %d: the ranges of %d nodes overlap", publicPort, adminPort, clusterPort, nodes)}
			}
			if _, p, err := net.SplitHostPort(originAddr); err == nil {
				if port, _ := strconv.Atoi(p); inRange(port) {
					return usageError{fmt.Errorf("--origin-listen %s: the port is one of the nodes' (%d…, %d…, %d… for %d nodes); choose another", originAddr, publicPort, adminPort, clusterPort, nodes)}
				}
			}
			self, err := os.Executable()
			if err != nil {
				return fmt.Errorf("demo: %w", err)
			}
			// A closed terminal stops the demo as Ctrl-C does: its nodes, in
			// process groups of their own, do not get the SIGHUP (which they
			// would take for a reload, and live on).
			ctx, stopSignals := signal.NotifyContext(cmd.Context(), syscall.SIGHUP)
			defer stopSignals()
			type addrs struct{ id, pub, adm, peer string }
			var ns []addrs
			var peerList []string
			for i := 1; i <= nodes; i++ {
				a := addrs{fmt.Sprintf("edge-%d", i), fmt.Sprintf("127.0.0.1:%d", publicPort+i-1), fmt.Sprintf("127.0.0.1:%d", adminPort+i-1), fmt.Sprintf("127.0.0.1:%d", clusterPort+i-1)}
				ns = append(ns, a)
				peerList = append(peerList, a.id+"="+a.peer)
			}
			// Every node runs the same cache rules (docs/rules.md), so that the
			// status page and the dashboard show them at work.
			rulesFile, err := os.CreateTemp("", demoTempPrefix("rules")+"*.yaml")
			if err != nil {
				return fmt.Errorf("demo: %w", err)
			}
			defer func() { _ = os.Remove(rulesFile.Name()) }()
			if _, err := rulesFile.WriteString(demoRules); err != nil {
				return fmt.Errorf("demo: writing %s: %w", rulesFile.Name(), err)
			}
			_ = rulesFile.Close()
			// Before anything starts: a port in use (most often a demo still
			// running, or one whose nodes outlived it) would leave that node
			// unable to start while the old one answered its readiness check.
			listeners := [][2]string{{"the origin", originAddr}}
			for _, a := range ns {
				listeners = append(listeners, [2]string{a.id + "'s public listener", a.pub}, [2]string{a.id + "'s admin listener", a.adm})
				if nodes > 1 {
					listeners = append(listeners, [2]string{a.id + "'s cluster listener", a.peer})
				}
			}
			for _, l := range listeners {
				if err := portFree(l[1]); err != nil {
					// The process is named, not killed by a pattern: `pkill -f
					// 'edge serve'`, the advice before, stopped every edge node
					// on a shared host, not just a stale demo's.
					_, port, _ := net.SplitHostPort(l[1])
					return fmt.Errorf("demo: %s %s is not free (%w): is another edge demo, or a node of one, still running? See what holds it (ss -ltnp 'sport = :%s') and stop that, or move the demo (--public-port, --admin-port, --cluster-port, --origin-listen)", l[0], l[1], err, port)
				}
			}
			procs := []*exec.Cmd{exec.Command(self, "origin", "--listen", originAddr)}
			names := []string{"the origin"}
			for _, a := range ns {
				args := []string{"serve", "-c", rulesFile.Name(), "--origin", "http://" + originAddr, "--listen", a.pub, "--admin-listen", a.adm,
					"--admin-token", token, "--node-id", a.id}
				if nodes > 1 {
					args = append(args, "--cluster-listen", a.peer, "--peers", strings.Join(peerList, ","), "--secret", secret)
				}
				if diskRoot != "" {
					// Each node its own directory: a demo restarted keeps its pages.
					args = append(args, "--disk-path", filepath.Join(diskRoot, a.id), "--disk-size", "1GiB")
					if nodes > 1 {
						// Beside it, what the node owes its peers (not inside:
						// the disk tier removes files it did not write).
						args = append(args, "--state-dir", filepath.Join(diskRoot, a.id+"-state"))
					}
				}
				if extra != "" {
					args = append(args, strings.Fields(extra)...)
				}
				node := exec.Command(self, args...)
				node.Env = demoNodeEnv(os.Environ(), runtime.NumCPU(), nodes)
				procs = append(procs, node)
				names = append(names, a.id)
			}
			running := newDemoProcs()
			for i, p := range procs {
				p.Stdout, p.Stderr = os.Stdout, os.Stderr
				p.SysProcAttr = demoChildAttr()
				if err := running.start(names[i], p); err != nil {
					running.stop()
					return fmt.Errorf("demo: starting %v: %w", p.Args, err)
				}
			}
			for _, a := range ns {
				if err := waitReady(ctx, "http://"+a.adm+"/readyz", 10*time.Second, running.exited); err != nil {
					running.stop()
					return err
				}
			}
			w := cmd.OutOrStdout()
			fmt.Fprintf(w, "\nedge demo is up: origin http://%s/ and %d edge node(s)\n", originAddr, nodes)
			for _, a := range ns {
				fmt.Fprintf(w, "  %-8s public http://%s/   admin http://%s/status   cluster %s\n", a.id, a.pub, a.adm, a.peer)
			}
			a := ns[0]
			fmt.Fprintf(w, `
Try:
  curl -si http://%[1]s/p/42 | grep -i cache-status   # fwd=uri-miss (via the page's home in a cluster)
  curl -si http://%[1]s/p/42 | grep -i cache-status   # again (a cluster node keeps a page from its 2nd request)
  curl -si http://%[1]s/p/42 | grep -i cache-status   # hit, from memory
  open http://%[2]s/status                                          # peers, detector margins, indicators
  curl -s  http://%[2]s/metrics | grep -E '^edge_(requests_total|peer_up|peer_probes_total)'
  curl -s -X POST -H 'Authorization: Bearer %[3]s' 'http://%[2]s/purge?url=http://%[1]s/p/42'   # purges every node

Ctrl-C stops everything.
`, a.pub, a.adm, token)
			select {
			case <-ctx.Done():
				running.stop()
				return nil
			case e := <-running.exited:
				running.stop()
				return fmt.Errorf("demo: %s exited (%v), so the demo stopped the rest: its log is above", e.name, e.err)
			}
		},
	}
	f := cmd.Flags()
	f.IntVar(&nodes, "nodes", 3, "edge nodes")
	f.IntVar(&publicPort, "public-port", 8080, "node 1's public port (node i's: this + i - 1)")
	f.IntVar(&adminPort, "admin-port", 9180, "node 1's admin port (node i's: this + i - 1)")
	f.IntVar(&clusterPort, "cluster-port", 7946, "node 1's cluster port (node i's: this + i - 1)")
	f.StringVar(&originAddr, "origin-listen", "127.0.0.1:8090", "demo origin address")
	f.StringVar(&token, "admin-token", "edge-demo-admin-token", "admin bearer token for purge")
	f.StringVar(&secret, "secret", "demo-cluster-secret", "cluster secret")
	f.StringVar(&extra, "serve-args", "", "extra arguments for every edge serve, e.g. \"--routing-mode tree\"")
	f.StringVar(&diskRoot, "disk-root", "", "directory that keeps the nodes' disk tiers across runs (one subdirectory each); unset: a fresh one per run, removed at exit; \"\": RAM only")
	return cmd
}

// demoProcs are the demo's running processes. Each has one goroutine
// waiting for it, which reports its end on exited (a node that stops, or
// never starts, ends the demo) and closes its done channel.
type demoProcs struct {
	procs  []*exec.Cmd
	done   []chan struct{}
	exited chan demoExit
}

// demoExit is a process's end: its name ("edge-2") and Wait's error.
type demoExit struct {
	name string
	err  error
}

func newDemoProcs() *demoProcs { return &demoProcs{exited: make(chan demoExit, 64)} }

func (d *demoProcs) start(name string, p *exec.Cmd) error {
	if err := p.Start(); err != nil {
		return err
	}
	done := make(chan struct{})
	d.procs, d.done = append(d.procs, p), append(d.done, done)
	go func() {
		err := p.Wait()
		if err == nil {
			err = errors.New("exit status 0")
		}
		select {
		case d.exited <- demoExit{name, err}:
		default: // only the first end is read
		}
		close(done)
	}()
	return nil
}

// stop sends SIGTERM to every process and waits for them, killing one
// that has not ended 20 s later.
func (d *demoProcs) stop() {
	var wg sync.WaitGroup
	for i, p := range d.procs {
		_ = p.Process.Signal(syscall.SIGTERM)
		wg.Add(1)
		go func(p *exec.Cmd, done chan struct{}) {
			defer wg.Done()
			select {
			case <-done:
			case <-time.After(20 * time.Second):
				_ = p.Process.Kill()
				<-done
			}
		}(p, d.done[i])
	}
	wg.Wait()
}

// portFree reports whether addr can be listened on (TCP), by listening.
func portFree(addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	return ln.Close()
}

// waitReady polls url until it answers 200 or the timeout passes, or one
// of the demo's processes ends (as a node that cannot listen does).
func waitReady(ctx context.Context, url string, timeout time.Duration, exited <-chan demoExit) error {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case e := <-exited:
			return fmt.Errorf("demo: %s exited before the demo was up (%v): its log is above", e.name, e.err)
		case <-time.After(100 * time.Millisecond):
		}
	}
	return fmt.Errorf("demo: %s not ready after %s", url, timeout)
}

// demoNodeEnv is a demo node's environment: the demo's own, with GOMAXPROCS
// set to the node's share of the cores (at least one) unless the user set
// it. The demo's nodes share one host; with a P per core each, the Go
// runtime hands woken goroutines to threads on other cores, and a page a
// peer answers took 66–163 µs longer (three nodes on two cores, six pairs
// of scripts/peerlatency-ab.sh; docs/benchmarks.md, "One scheduler thread
// per node"). A node on a host of its own keeps the runtime's default.
// Only a positive whole number counts as set, as only that is what the Go
// runtime obeys: an empty, zero, negative or malformed GOMAXPROCS, which it
// ignores, is replaced by the share.
func demoNodeEnv(environ []string, cores, nodes int) []string {
	out := make([]string, 0, len(environ)+1)
	for _, kv := range environ {
		if v, ok := strings.CutPrefix(kv, "GOMAXPROCS="); ok {
			if n, err := strconv.Atoi(v); err == nil && n > 0 {
				return environ
			}
			continue // ignored by the runtime: dropped for the share
		}
		out = append(out, kv)
	}
	share := max(1, cores/max(nodes, 1))
	return append(out, "GOMAXPROCS="+strconv.Itoa(share))
}
