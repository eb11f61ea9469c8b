package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
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

func demoCmd() *cobra.Command {
	var originAddr, token, secret, extra, diskRoot string
	var nodes int
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Run the demo origin and a cluster of edge nodes in front of it, as separate processes",
		Long: `Run the demo origin and N edge nodes as separate processes on 127.0.0.1.
Node i (1-based) listens on 8079+i (public), 9179+i (admin) and 7945+i (cluster).
Each run starts cold, with disk tiers in a fresh temporary directory removed at exit, so that
the README's walk-through prints what it says every time; --disk-root DIR keeps them in
DIR/edge-i across runs (a restarted demo serves what it had stored), --disk-root "" runs from RAM.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if nodes < 1 || nodes > 50 {
				return usageError{fmt.Errorf("--nodes %d: want 1..50", nodes)}
			}
			if !cmd.Flags().Changed("disk-root") {
				fresh, err := os.MkdirTemp("", "edge-demo-disk-*")
				if err != nil {
					return fmt.Errorf("demo: %w", err)
				}
				defer func() { _ = os.RemoveAll(fresh) }()
				diskRoot = fresh
			}
			if _, p, err := net.SplitHostPort(originAddr); err == nil {
				if port, _ := strconv.Atoi(p); port >= 8080 && port < 8080+nodes || port >= 9180 && port < 9180+nodes || port >= 7946 && port < 7946+nodes {
					return usageError{fmt.Errorf("--origin-listen %s: the port is one of the nodes' (8080…, 9180…, 7946… for %d nodes); choose another", originAddr, nodes)}
				}
			}
			self, err := os.Executable()
			if err != nil {
				return fmt.Errorf("demo: %w", err)
			}
			ctx := cmd.Context()
			type addrs struct{ id, pub, adm, peer string }
			var ns []addrs
			var peerList []string
			for i := 1; i <= nodes; i++ {
				a := addrs{fmt.Sprintf("edge-%d", i), fmt.Sprintf("127.0.0.1:%d", 8079+i), fmt.Sprintf("127.0.0.1:%d", 9179+i), fmt.Sprintf("127.0.0.1:%d", 7945+i)}
				ns = append(ns, a)
				peerList = append(peerList, a.id+"="+a.peer)
			}
			// Every node runs the same cache rules (docs/rules.md), so that the
			// status page and the dashboard show them at work.
			rulesFile, err := os.CreateTemp("", "edge-demo-rules-*.yaml")
			if err != nil {
				return fmt.Errorf("demo: %w", err)
			}
			defer func() { _ = os.Remove(rulesFile.Name()) }()
			if _, err := rulesFile.WriteString(demoRules); err != nil {
				return fmt.Errorf("demo: writing %s: %w", rulesFile.Name(), err)
			}
			_ = rulesFile.Close()
			procs := []*exec.Cmd{exec.Command(self, "origin", "--listen", originAddr)}
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
			}
			for _, p := range procs {
				p.Stdout, p.Stderr = os.Stdout, os.Stderr
				if err := p.Start(); err != nil {
					stopAll(procs)
					return fmt.Errorf("demo: starting %v: %w", p.Args, err)
				}
			}
			for _, a := range ns {
				if err := waitReady(ctx, "http://"+a.adm+"/readyz", 10*time.Second); err != nil {
					stopAll(procs)
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
			<-ctx.Done()
			stopAll(procs)
			return nil
		},
	}
	f := cmd.Flags()
	f.IntVar(&nodes, "nodes", 3, "edge nodes")
	f.StringVar(&originAddr, "origin-listen", "127.0.0.1:8090", "demo origin address")
	f.StringVar(&token, "admin-token", "demo-token", "admin bearer token for purge")
	f.StringVar(&secret, "secret", "demo-cluster-secret", "cluster secret")
	f.StringVar(&extra, "serve-args", "", "extra arguments for every edge serve, e.g. \"--routing-mode tree\"")
	f.StringVar(&diskRoot, "disk-root", "", "directory that keeps the nodes' disk tiers across runs (one subdirectory each); unset: a fresh one per run, removed at exit; \"\": RAM only")
	return cmd
}

// stopAll sends SIGTERM to every started process and waits for them.
func stopAll(procs []*exec.Cmd) {
	var wg sync.WaitGroup
	for _, p := range procs {
		if p.Process == nil {
			continue
		}
		_ = p.Process.Signal(syscall.SIGTERM)
		wg.Add(1)
		go func(p *exec.Cmd) {
			defer wg.Done()
			done := make(chan struct{})
			go func() { _ = p.Wait(); close(done) }()
			select {
			case <-done:
			case <-time.After(20 * time.Second):
				_ = p.Process.Kill()
				<-done
			}
		}(p)
	}
	wg.Wait()
}

// waitReady polls url until it answers 200 or the timeout passes.
func waitReady(ctx context.Context, url string, timeout time.Duration) error {
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
