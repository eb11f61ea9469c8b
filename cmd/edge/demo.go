package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"
)

func demoCmd() *cobra.Command {
	var originAddr, listen, adminListen, token string
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Run the demo origin and an edge node in front of it, as separate processes",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			self, err := os.Executable()
			if err != nil {
				return fmt.Errorf("demo: %w", err)
			}
			ctx := cmd.Context()
			procs := []*exec.Cmd{
				exec.Command(self, "origin", "--listen", originAddr),
				exec.Command(self, "serve", "--origin", "http://"+originAddr, "--listen", listen,
					"--admin-listen", adminListen, "--admin-token", token, "--node-id", "edge-1"),
			}
			for _, p := range procs {
				p.Stdout, p.Stderr = os.Stdout, os.Stderr
				if err := p.Start(); err != nil {
					stopAll(procs)
					return fmt.Errorf("demo: starting %v: %w", p.Args, err)
				}
			}
			if err := waitReady(ctx, "http://"+adminListen+"/readyz", 10*time.Second); err != nil {
				stopAll(procs)
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), `
edge demo is up.
  origin        http://%[1]s/
  edge node     http://%[2]s/   (public)
  admin         http://%[3]s/status   /metrics   /healthz

Try:
  curl -si http://%[2]s/p/42 | grep -i -E '^(cache-status|age)'   # first: fwd=uri-miss; stored
  curl -si http://%[2]s/p/42 | grep -i -E '^(cache-status|age)'   # again: hit, from memory
  curl -s  http://%[3]s/metrics | grep edge_requests_total
  curl -s -X POST -H 'Authorization: Bearer %[4]s' 'http://%[3]s/purge?url=http://%[2]s/p/42'

Ctrl-C stops everything.
`, originAddr, listen, adminListen, token)
			<-ctx.Done()
			stopAll(procs)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&originAddr, "origin-listen", "127.0.0.1:8090", "demo origin address")
	f.StringVar(&listen, "listen", "127.0.0.1:8080", "edge public address")
	f.StringVar(&adminListen, "admin-listen", "127.0.0.1:9180", "edge admin address")
	f.StringVar(&token, "admin-token", "demo-token", "admin bearer token for purge")
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
