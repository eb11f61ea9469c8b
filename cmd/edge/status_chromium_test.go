package main

import (
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/edgecache/edge/internal/prereq"
)

// chromium returns the headless browser, or skips the test when none is
// installed (make test installs Debian's chromium first).
func chromium(t *testing.T) string {
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	prereq.Missing(t, "chromium", errors.New("neither chromium nor chromium-browser is on PATH (make test installs Debian's chromium)"))
	return ""
}

func headless(t *testing.T, bin string, args ...string) []byte {
	t.Helper()
	base := []string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--user-data-dir=" + t.TempDir()}
	cmd := exec.Command(bin, append(base, args...)...)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("chromium %v: %v", args, err)
	}
	return out
}

// TestStatusPageInChromium drives the admin status page of a two-node
// cluster in headless Chromium, checks what an operator must see, and saves
// a screenshot (to docs/img/status.png with EDGE_SAVE_SCREENSHOT=1).
func TestStatusPageInChromium(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes and a browser")
	}
	bin := chromium(t)
	origin := freeAddr(t)
	startOrigin(t, origin, "2ms")
	a := &testNode{id: "edge-a", pub: freeAddr(t), adm: freeAddr(t), peer: freeAddr(t)}
	b := &testNode{id: "edge-b", pub: freeAddr(t), adm: freeAddr(t), peer: freeAddr(t)}
	peers := a.id + "=" + a.peer + "," + b.id + "=" + b.peer
	for _, n := range []*testNode{a, b} {
		startEdge(t, "serve", "--origin", "http://"+origin, "--listen", n.pub, "--admin-listen", n.adm,
			"--node-id", n.id, "--cluster-listen", n.peer, "--peers", peers, "--secret", "status-test-secret-0123", "--admin-token", "status-token")
	}
	waitUp(t, "http://"+a.adm+"/readyz")
	waitFor(t, "the peers to trust each other", 10*time.Second, func() bool { return metric(t, a.adm, "edge_view_members") == 2 })
	for i := range 400 {
		n := a
		if i%2 == 1 {
			n = b
		}
		page := "/p/7"
		if i%3 == 0 {
			page = "/p/" + strconv.Itoa(100+i%40)
		}
		get(t, "http://"+n.pub+page)
	}
	waitFor(t, "/p/7 among the hottest pages", 10*time.Second, func() bool {
		req, _ := http.NewRequest("GET", "http://"+a.adm+"/status.json", nil)
		req.SetBasicAuth("admin", "status-token")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return strings.Contains(string(b), "/p/7")
	})
	// Without the token the hottest URLs are hidden; a browser sends it as
	// the password of Basic credentials.
	if dom := string(headless(t, bin, "--dump-dom", "http://"+a.adm+"/status")); strings.Contains(dom, "/p/7</code>") || !strings.Contains(dom, "admin token") {
		t.Errorf("the hottest URLs are visible without the admin token")
	}
	url := "http://admin:status-token@" + a.adm + "/status?login=1&url=http://" + a.pub + "/p/7" // login=1: a 401 makes the browser send the credentials
	dom := string(headless(t, bin, "--dump-dom", url))
	for _, want := range []string{"edge node", "edge-a", "Cluster", "edge-b", "trusted", "FD margin", "indicator epoch",
		"Hottest pages", "/p/7", "Compression", "Route explorer", "home (rank 2)", "cold path", "miss penalty", "hit ratio",
		"Failure detector: ml, loss-aware margin with budget 2.5e-06 per heartbeat and the rate estimator"} {
		if !strings.Contains(dom, want) {
			t.Errorf("status page lacks %q", want)
		}
	}
	shot := filepath.Join(t.TempDir(), "status.png")
	if os.Getenv("EDGE_SAVE_SCREENSHOT") == "1" {
		shot, _ = filepath.Abs("../../docs/img/status.png")
	}
	headless(t, bin, "--screenshot="+shot, "--window-size=1280,1500", "--hide-scrollbars", url)
	if st, err := os.Stat(shot); err != nil || st.Size() < 10000 {
		t.Fatalf("screenshot %s: %v", shot, err)
	}
	t.Logf("screenshot: %s", shot)
}
