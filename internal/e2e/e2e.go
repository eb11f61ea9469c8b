// Package e2e runs edge processes for end-to-end tests: free loopback
// ports, starting a binary and stopping it at cleanup, waiting until it
// serves, reading its metrics and the demo origin's counters.
//
// The end-to-end tests are spread over several packages (cmd/edge, e2e/…)
// so that go test runs them side by side and no one test binary nears its
// time limit on a loaded machine; this package is what they share.
package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/edgecache/edge/internal/promtext"
)

// FreeAddr returns a loopback address with a port that was free just now.
//
// A port the kernel hands out with :0 is an ephemeral one: between our
// close and the child's bind, any outgoing connection on the machine may
// take it. So ports come from below the ephemeral range (the kernel never
// assigns those on its own), from a block this process holds (portBlock),
// walked with a counter, each checked free (TCP and UDP: cluster listeners
// use both) before it is handed out.
func FreeAddr(t testing.TB) string {
	t.Helper()
	addr, err := FreeLoopbackAddr()
	if err != nil {
		t.Fatal(err)
	}
	return addr
}

// FreeLoopbackAddr is FreeAddr for programs that are not tests (the
// labs in scripts/, which start processes on ports of their choosing).
func FreeLoopbackAddr() (string, error) {
	base := portBlock()
	for range 2000 {
		port := base + int(nextPort.Add(1)%portSpan)
		addr := "127.0.0.1:" + strconv.Itoa(port)
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			continue
		}
		pc, err := net.ListenPacket("udp", addr)
		ln.Close()
		if err != nil {
			continue
		}
		_ = pc.Close()
		return addr, nil
	}
	return "", errors.New("e2e: no free port below the ephemeral range")
}

const (
	portSpan   = 2000
	portBlocks = 10 // 12000–31999
)

// portBlock returns the first port of this process's block. Test binaries
// run side by side (go test -p), and a port checked free by one can be
// taken by another's child before its own child binds it, so each process
// holds a block to itself: an exclusive lock on a file per block, kept
// until the process exits. The search starts at the process id's block; if
// every block is held, that one is shared and the bind check covers it.
func portBlock() int {
	blockOnce.Do(func() {
		start := os.Getpid() % portBlocks
		blockBase = 12000 + start*portSpan
		for i := range portBlocks {
			k := (start + i) % portBlocks
			// Read-only is enough for flock, and 0o644 lets another user's
			// test run open (and so respect) a lock file we created.
			name := filepath.Join(os.TempDir(), fmt.Sprintf("edge-e2e-ports-%d.lock", k))
			f, err := os.OpenFile(name, os.O_CREATE|os.O_RDONLY, 0o644)
			if err != nil {
				f, err = os.Open(name)
			}
			if err != nil {
				continue // this block's lock cannot be taken: try the next
			}
			if syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) == nil {
				blockLock, blockBase = f, 12000+k*portSpan // blockLock stays open: closing it would release the block
				return
			}
			_ = f.Close()
		}
	})
	return blockBase
}

var (
	blockOnce sync.Once
	blockBase int
	blockLock *os.File
	nextPort  atomic.Int64
)

// PortOf returns addr's port.
func PortOf(addr string) string {
	_, p, _ := net.SplitHostPort(addr)
	return p
}

// AsMainEnv is set in every started process's environment: a test binary
// that finds it acts as the edge command (see cmd/edge's TestMain).
const AsMainEnv = "EDGE_TEST_AS_MAIN"

// Start runs bin with args, logs its stderr into the test's log, and kills
// it at cleanup if it is still running.
func Start(t testing.TB, bin string, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), AsMainEnv+"=1")
	cmd.Stderr = &LogWriter{T: t, Prefix: args[0]}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	return cmd
}

// LogWriter writes a process's output into a test's log, line by line.
type LogWriter struct {
	T      testing.TB
	Prefix string
}

func (w *LogWriter) Write(p []byte) (int, error) {
	s := bufio.NewScanner(strings.NewReader(string(p)))
	for s.Scan() {
		w.T.Logf("[%s] %s", w.Prefix, s.Text())
	}
	return len(p), nil
}

// Edge returns an edge binary built from this module, once per test
// process, with the race detector when the tests have it (so that a race in
// a child process is reported too).
func Edge(t testing.TB) string {
	t.Helper()
	return race.get(t, raceEnabled)
}

// PlainEdge returns an edge binary built without the race detector, once
// per test process, for measurements (memory) that the detector's shadow
// memory would distort.
func PlainEdge(t testing.TB) string {
	t.Helper()
	return plain.get(t, false)
}

// build is one edge binary, built on first use.
type build struct {
	once sync.Once
	path string
	err  error
}

var race, plain build

func (b *build) get(t testing.TB, withRace bool) string {
	t.Helper()
	b.once.Do(func() {
		dir, err := os.MkdirTemp("", "edge-e2e-")
		if err != nil {
			b.err = err
			return
		}
		b.path = filepath.Join(dir, "edge")
		args := []string{"build", "-o", b.path}
		if withRace {
			args = append(args, "-race")
		}
		if out, err := exec.Command("go", append(args, "github.com/edgecache/edge/cmd/edge")...).CombinedOutput(); err != nil {
			b.err = fmt.Errorf("go build: %v: %s", err, out)
		}
	})
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.path
}

// Main is TestMain for a package of end-to-end tests: it runs them, then
// removes the binary Edge built.
func Main(m *testing.M) {
	code := m.Run()
	for _, b := range []*build{&race, &plain} {
		if b.path != "" {
			_ = os.RemoveAll(filepath.Dir(b.path))
		}
	}
	if blockLock != nil {
		_ = blockLock.Close() // the port block is free for the next test binary
	}
	os.Exit(code)
}

// StartOrigin runs bin's demo origin on addr with the given added latency
// and no jitter, and waits until it answers: on a loaded machine its
// process can start after the edge that uses it.
func StartOrigin(t testing.TB, bin, addr, latency string) {
	t.Helper()
	Start(t, bin, "origin", "--listen", addr, "--latency", latency, "--jitter", "0s")
	WaitUp(t, "http://"+addr+"/_stats")
}

// WaitUp waits until url answers 200, for up to 15 s (a loaded machine
// may start a child process late).
func WaitUp(t testing.TB, url string) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		resp, err := http.Get(url)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("%s not ready after 15s", url)
}

// WaitFor polls cond every 20 ms until it holds, failing the test after
// timeout, and returns how long it took.
func WaitFor(t testing.TB, what string, timeout time.Duration, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for time.Since(start) < timeout {
		if cond() {
			return time.Since(start)
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("timed out after %s waiting for %s", timeout, what)
	return 0
}

// Get fetches url with the header pairs hdr and returns the response and
// its body. It asks for identity unless hdr names an Accept-Encoding: Go's
// client would otherwise ask for gzip, and compressing every miss under
// the race detector costs up to 200 ms a page, which made the end-to-end
// tests slow for nothing they check (the compression tests ask for their
// codings explicitly).
func Get(t testing.TB, url string, hdr ...string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	req.Header.Set("Accept-Encoding", "identity")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// Metric returns the value of the first series starting with prefix on the
// admin listener adm, or -1 when the node does not answer or has no such
// series.
func Metric(t testing.TB, adm, prefix string) float64 {
	t.Helper()
	samples, err := promtext.Scrape(context.Background(), "http://"+adm+"/metrics")
	if err != nil {
		return -1
	}
	if v, ok := promtext.First(samples, prefix); ok {
		return v
	}
	return -1
}

// DemoStats is the demo origin's /_stats.
type DemoStats struct {
	Paths  map[string]int `json:"paths"`
	Bytes  int64          `json:"bytes_sent"`
	Ranges int64          `json:"ranges"`
}

// OriginStats reads the demo origin's stats: the 100 most requested paths,
// and the exact counts of the named ones.
func OriginStats(t testing.TB, origin string, paths ...string) DemoStats {
	t.Helper()
	q := url.Values{"path": paths}
	resp, err := http.Get("http://" + origin + "/_stats?" + q.Encode())
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var st DemoStats
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		t.Fatal(err)
	}
	return st
}
