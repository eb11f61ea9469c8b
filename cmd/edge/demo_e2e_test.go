package main

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/edgecache/edge/internal/e2e"
)

// demoRun is an `edge demo` of two nodes on ports of its own (below the
// ephemeral range, so that no test's client socket takes one meanwhile).
type demoRun struct {
	cmd                    *exec.Cmd
	public, admin, cluster int
	origin                 string
	mu                     sync.Mutex
	out                    bytes.Buffer
}

func (d *demoRun) Write(p []byte) (int, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.out.Write(p)
}

func (d *demoRun) output() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.out.String()
}

// newDemoRun picks free ports for a two-node demo; it starts nothing.
func newDemoRun(t *testing.T, bin string) *demoRun {
	t.Helper()
	for try := 0; try < 50; try++ {
		base := 20000 + int(time.Now().UnixNano()/1000%10000)
		d := &demoRun{public: base, admin: base + 2, cluster: base + 4, origin: "127.0.0.1:" + strconv.Itoa(base+6)}
		free := true
		for p := base; p < base+7; p++ {
			if portFree("127.0.0.1:"+strconv.Itoa(p)) != nil {
				free = false
			}
		}
		if free {
			d.cmd = exec.Command(bin, "demo", "--nodes", "2", "--disk-root", "",
				"--public-port", strconv.Itoa(d.public), "--admin-port", strconv.Itoa(d.admin), "--cluster-port", strconv.Itoa(d.cluster),
				"--origin-listen", d.origin)
			d.cmd.Stdout, d.cmd.Stderr = d, d
			t.Cleanup(func() {
				if d.cmd.Process != nil && d.cmd.ProcessState == nil {
					_ = d.cmd.Process.Signal(syscall.SIGTERM)
					_ = d.cmd.Wait()
				}
				if t.Failed() {
					t.Logf("the demo's output:\n%s", d.output())
				}
			})
			return d
		}
	}
	t.Fatal("no seven free ports in a row")
	return nil
}

func (d *demoRun) adminAddr(i int) string { return "127.0.0.1:" + strconv.Itoa(d.admin+i-1) }

// up starts the demo and waits until both nodes are ready.
func (d *demoRun) up(t *testing.T) {
	t.Helper()
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	e2e.WaitFor(t, "the demo's banner", 60*time.Second, func() bool { return strings.Contains(d.output(), "edge demo is up") })
	for i := 1; i <= 2; i++ {
		if resp, err := http.Get("http://" + d.adminAddr(i) + "/readyz"); err != nil || resp.StatusCode != 200 {
			t.Fatalf("edge-%d not ready after the banner: %v", i, err)
		} else {
			resp.Body.Close()
		}
	}
}

// nodesGone waits until no process of the demo listens on its ports.
func (d *demoRun) nodesGone(t *testing.T, after string) {
	t.Helper()
	e2e.WaitFor(t, "every node of the demo gone "+after, 30*time.Second, func() bool {
		for _, addr := range []string{d.adminAddr(1), d.adminAddr(2), d.origin} {
			if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
				c.Close()
				return false
			}
		}
		return true
	})
}

// pidOf is the process whose command line holds every one of words.
func pidOf(t *testing.T, words ...string) int {
	t.Helper()
	dirs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, f := range dirs {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		line := strings.ReplaceAll(string(b), "\x00", " ")
		all := true
		for _, w := range words {
			all = all && strings.Contains(line, w)
		}
		if all {
			pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(f)))
			return pid
		}
	}
	t.Fatalf("no process with %q", words)
	return 0
}

// TestDemoLeavesNoNodeBehind: however the demo ends (its terminal closed,
// SIGKILL), its nodes end with it; before, a SIGHUP reached the nodes too
// (which reload on it) and they outlived the demo, holding its ports, and
// the next demo's readiness checks were answered by them (a new user's
// walk-through found it).
func TestDemoLeavesNoNodeBehind(t *testing.T) {
	bin := e2e.PlainEdge(t)
	t.Run("SIGHUP", func(t *testing.T) {
		d := newDemoRun(t, bin)
		d.up(t)
		_ = d.cmd.Process.Signal(syscall.SIGHUP)
		if err := d.cmd.Wait(); err != nil {
			t.Fatalf("the demo after SIGHUP: %v", err)
		}
		d.nodesGone(t, "after a SIGHUP to the demo")
		if strings.Contains(d.output(), "reloading") {
			t.Error("a node took the demo's SIGHUP for a reload")
		}
	})
	t.Run("SIGKILL", func(t *testing.T) {
		d := newDemoRun(t, bin)
		d.up(t)
		_ = d.cmd.Process.Kill()
		_ = d.cmd.Wait()
		d.nodesGone(t, "after a SIGKILL of the demo")
	})
}

// TestDemoStopsWhenANodeCannotStart: a port in use is named before
// anything starts, and a node that exits (here killed once up) ends the
// demo with an error naming it, the rest stopped; before, the demo waited
// 10 s, or ran on without the node.
func TestDemoStopsWhenANodeCannotStart(t *testing.T) {
	bin := e2e.PlainEdge(t)
	t.Run("port in use", func(t *testing.T) {
		d := newDemoRun(t, bin)
		ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(d.public+1))
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		if err := d.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		err = d.cmd.Wait()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 1 {
			t.Fatalf("the demo with edge-2's port taken: %v, want exit status 1", err)
		}
		if want := fmt.Sprintf("edge-2's public listener 127.0.0.1:%d is not free", d.public+1); !strings.Contains(d.output(), want) {
			t.Errorf("the demo's output does not say %q", want)
		}
	})
	t.Run("a node exits", func(t *testing.T) {
		d := newDemoRun(t, bin)
		d.up(t)
		_ = syscall.Kill(pidOf(t, "serve", "--admin-listen "+d.adminAddr(2)), syscall.SIGKILL)
		err := d.cmd.Wait()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 1 {
			t.Fatalf("the demo after edge-2 was killed: %v, want exit status 1", err)
		}
		if !strings.Contains(d.output(), "demo: edge-2 exited") {
			t.Error("the demo's output does not name edge-2 as the node that exited")
		}
		d.nodesGone(t, "after edge-2 exited")
	})
}
