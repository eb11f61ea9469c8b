package main

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// getHost sends GET url with a Host field and returns the status and Cache-Status.
func getHost(t *testing.T, url, host string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	req.Host = host
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s (Host %s): %v", url, host, err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, resp.Header.Get("Cache-Status")
}

// TestSitesAndOriginPools runs one node with two sites and three demo
// origins: Host routing and 421, per-site entries, a pool spreading its
// misses, an origin killed (no client error: the retry goes to the other)
// and brought back by the active check.
func TestSitesAndOriginPools(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	o1, o2, o3 := freeAddr(t), freeAddr(t), freeAddr(t)
	startOrigin(t, o1, "1ms")
	o2cmd := startEdge(t, "origin", "--listen", o2, "--latency", "1ms", "--jitter", "0s")
	waitUp(t, "http://"+o2+"/_stats")
	startOrigin(t, o3, "1ms")
	pub, adm := freeAddr(t), freeAddr(t)
	conf := fmt.Sprintf(`listen: "%s"
admin:
  listen: "%s"
node_id: "edge-sites"
sites:
  - name: shop
    hosts: ["shop.test", "*.shop.test"]
    origins: ["http://%s", "http://%s"]
    health: {path: "/_stats", interval: "200ms", timeout: "500ms"}
  - name: blog
    hosts: ["blog.test"]
    origins: ["http://%s"]
`, pub, adm, o1, o2, o3)
	file := filepath.Join(t.TempDir(), "edge.yaml")
	if err := os.WriteFile(file, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	startEdge(t, "serve", "-c", file)
	waitUp(t, "http://"+adm+"/readyz")
	base := "http://" + pub

	// Host routing: exact, wildcard (any case, any port), and 421.
	for _, host := range []string{"shop.test", "WWW.Shop.Test:8080", "blog.test"} {
		if code, _ := getHost(t, base+"/p/1", host); code != 200 {
			t.Errorf("Host %s: %d", host, code)
		}
	}
	for _, host := range []string{"unknown.test", "a.b.shop.test", "shop.test.evil"} {
		if code, cs := getHost(t, base+"/p/1", host); code != http.StatusMisdirectedRequest || cs != "edge-sites; detail=no-site" {
			t.Errorf("Host %s: %d %q, want 421 with the node's Cache-Status", host, code, cs)
		}
	}
	// Per-site entries: the same path is cached once per site.
	if _, cs := getHost(t, base+"/p/1", "shop.test"); cs != "edge-sites; hit" {
		t.Errorf("shop.test /p/1 again: %q", cs)
	}
	if n := originCount(t, o3, "/p/1"); n != 1 {
		t.Errorf("blog's origin saw /p/1 %d times, want 1", n)
	}
	// The pool spreads misses over both origins.
	for i := range 40 {
		if code, _ := getHost(t, fmt.Sprintf("%s/p/%d", base, 100+i), "shop.test"); code != 200 {
			t.Fatalf("spread %d: %d", i, code)
		}
	}
	c1, c2 := 0, 0
	for i := range 40 {
		c1 += originCount(t, o1, fmt.Sprintf("/p/%d", 100+i))
		c2 += originCount(t, o2, fmt.Sprintf("/p/%d", 100+i))
	}
	if c1 == 0 || c2 == 0 || c1+c2 != 40 {
		t.Errorf("40 misses split %d/%d over the two origins", c1, c2)
	}
	// Kill one origin: every request still succeeds (the retry goes to the
	// other), and the dead one is ejected.
	_ = o2cmd.Process.Signal(syscall.SIGKILL)
	_ = o2cmd.Wait()
	for i := range 60 {
		if code, _ := getHost(t, fmt.Sprintf("%s/p/%d", base, 200+i), "shop.test"); code != 200 {
			t.Errorf("with an origin dead, request %d: %d", i, code)
		}
	}
	up := fmt.Sprintf(`edge_origin_up{origin="http://%s",site="shop"}`, o2)
	waitFor(t, "the dead origin to be ejected", 60*time.Second, func() bool { return metric(t, adm, up) == 0 })
	// Bring it back on the same address: the active check returns it.
	startOrigin(t, o2, "1ms")
	waitFor(t, "the origin to come back", 60*time.Second, func() bool { return metric(t, adm, up) == 1 })
	if _, page := get(t, "http://"+adm+"/status"); !strings.Contains(page, "<h2>Sites</h2>") || !strings.Contains(page, "<h2>Origins</h2>") || !strings.Contains(page, o2) {
		t.Errorf("the status page lacks the sites table")
	}
}
