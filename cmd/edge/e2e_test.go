package main

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/edgecache/edge/internal/e2e"
)

// TestMain lets the test binary act as the edge command, so end-to-end
// tests run real edge processes without a separate build step.
func TestMain(m *testing.M) {
	if os.Getenv(e2e.AsMainEnv) == "1" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// The helpers every end-to-end test here uses, shared with the e2e/…
// packages through internal/e2e.
var (
	freeAddr = e2e.FreeAddr
	waitUp   = e2e.WaitUp
	get      = e2e.Get
	metric   = e2e.Metric
	waitFor  = e2e.WaitFor
)

// startEdge runs the test binary as `edge args...` and stops it at cleanup.
func startEdge(t *testing.T, args ...string) *exec.Cmd {
	t.Helper()
	return e2e.Start(t, os.Args[0], args...)
}

// startBinary runs bin (the test binary or a built edge) with args and
// stops it at cleanup.
func startBinary(t *testing.T, bin string, args ...string) *exec.Cmd {
	t.Helper()
	return e2e.Start(t, bin, args...)
}

// startOrigin runs the demo origin on addr and waits until it answers: on
// a loaded machine its process can start after the edge that uses it.
func startOrigin(t *testing.T, addr, latency string) { e2e.StartOrigin(t, os.Args[0], addr, latency) }

// plainEdge builds edge without the race detector, once per test run, for
// measurements (memory) that the detector's shadow memory would distort.
func plainEdge(t *testing.T) string { return e2e.PlainEdge(t) }

// TestSingleNodeEndToEnd runs the demo origin and one node as processes and
// checks the second request for a page is a hit from memory, purge works
// through the admin listener, and SIGTERM drains an in-flight request.
func TestSingleNodeEndToEnd(t *testing.T) {
	originAddr, pub, adm := freeAddr(t), freeAddr(t), freeAddr(t)
	startOrigin(t, originAddr, "5ms")
	node := startEdge(t, "serve", "--origin", "http://"+originAddr, "--listen", pub, "--admin-listen", adm,
		"--admin-token", "t0ken", "--node-id", "e2e")
	waitUp(t, "http://"+adm+"/readyz")

	r1, b1 := get(t, "http://"+pub+"/p/42")
	r2, b2 := get(t, "http://"+pub+"/p/42")
	if r1.StatusCode != 200 || b1 != b2 || len(b1) == 0 {
		t.Fatalf("statuses %d %d, bodies %d %d bytes", r1.StatusCode, r2.StatusCode, len(b1), len(b2))
	}
	if cs := r1.Header.Get("Cache-Status"); !strings.Contains(cs, "e2e; fwd=uri-miss") || !strings.Contains(cs, "stored") {
		t.Errorf("first Cache-Status %q", cs)
	}
	if cs := r2.Header.Get("Cache-Status"); cs != "e2e; hit" {
		t.Errorf("second Cache-Status %q, want a hit", cs)
	}
	_, stats := get(t, "http://"+originAddr+"/_stats")
	if !strings.Contains(stats, `"/p/42":1`) {
		t.Errorf("origin saw /p/42 more than once: %s", stats)
	}

	// Purge needs the token.
	purge := "http://" + adm + "/purge?url=http://" + pub + "/p/42"
	resp, err := http.Post(purge, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("purge without token: %d, want 401", resp.StatusCode)
	}
	req, _ := http.NewRequest(http.MethodPost, purge, nil)
	req.Header.Set("Authorization", "Bearer t0ken")
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(body), `"purged":1`) {
		t.Errorf("purge: %d %s", resp.StatusCode, body)
	}
	if r, _ := get(t, "http://"+pub+"/p/42"); !strings.Contains(r.Header.Get("Cache-Status"), "uri-miss") {
		t.Errorf("after purge: %q", r.Header.Get("Cache-Status"))
	}

	_, metrics := get(t, "http://"+adm+"/metrics")
	for _, want := range []string{`edge_requests_total{result="hit"} 1`, `edge_origin_requests_total{outcome="2xx"} 2`, "edge_store_bytes ", "edge_origin_request_duration_seconds_bucket"} {
		if !strings.Contains(metrics, want) {
			t.Errorf("metrics lack %q", want)
		}
	}

	// SIGTERM while a slow request is in flight: it completes, then the node exits 0.
	slowOrigin, slowPub, slowAdm := freeAddr(t), freeAddr(t), freeAddr(t)
	startOrigin(t, slowOrigin, "3s")
	slow := startEdge(t, "serve", "--origin", "http://"+slowOrigin, "--listen", slowPub, "--admin-listen", slowAdm)
	waitUp(t, "http://"+slowAdm+"/readyz")
	done := make(chan string, 1)
	go func() {
		resp, err := http.Get("http://" + slowPub + "/p/7")
		if err != nil {
			done <- "error: " + err.Error()
			return
		}
		defer resp.Body.Close()
		_, _ = io.Copy(io.Discard, resp.Body)
		done <- fmt.Sprint(resp.StatusCode)
	}()
	waitFor(t, "the request to be in flight", 10*time.Second, func() bool { return metric(t, slowAdm, "edge_inflight_requests") == 1 })
	_ = slow.Process.Signal(syscall.SIGTERM)
	if got := <-done; got != "200" {
		t.Errorf("in-flight request during drain: %s", got)
	}
	if err := slow.Wait(); err != nil {
		t.Errorf("node exit after SIGTERM: %v", err)
	}
	_ = node.Process.Signal(syscall.SIGTERM)
	_ = node.Wait()
}

func TestBadConfigStopsStartup(t *testing.T) {
	cmd := exec.Command(os.Args[0], "serve", "--origin", "http://127.0.0.1:1", "--cache-size", "huge")
	cmd.Env = append(os.Environ(), "EDGE_TEST_AS_MAIN=1")
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatal("edge serve started with a bad cache size")
	}
	if !strings.Contains(string(out), "cache.max_bytes") {
		t.Errorf("error does not name the key: %s", out)
	}
}
