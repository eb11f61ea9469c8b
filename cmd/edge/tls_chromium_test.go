package main

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// headlessQUIC runs Chromium like headless does, but with QUIC allowed.
func headlessQUIC(t *testing.T, bin string, args ...string) string {
	t.Helper()
	base := []string{"--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--user-data-dir=" + t.TempDir(), "--virtual-time-budget=5000"}
	cmd := exec.Command(bin, append(base, args...)...)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("chromium %v: %v", args, err)
	}
	return string(out)
}

// TestHTTPSInChromium loads a page through the edge's TLS listener in
// headless Chromium, with the test CA's leaf trusted by its key: the
// browser reports h2, and h3 when QUIC is forced for the origin. The
// second load of each is a cache hit, and the status page opens too.
func TestHTTPSInChromium(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes and a browser")
	}
	bin := chromium(t)
	originSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Set("Cache-Control", "public, max-age=300")
		_, _ = io.WriteString(w, `<!doctype html><html><body><h1>edge over TLS</h1><pre id="out"></pre><script>
var nav = performance.getEntriesByType("navigation")[0];
var x = new XMLHttpRequest(); x.open("GET", location.pathname + "?again", false); x.send();
document.getElementById("out").textContent = "proto=" + nav.nextHopProtocol + " status=" + x.getResponseHeader("cache-status");
</script></body></html>`)
	}))
	defer originSrv.Close()
	ca := newTestCA(t)
	dir := t.TempDir()
	now := time.Now()
	cert, key, spki := ca.leaf(t, dir, "site", 7, now.Add(-time.Hour), now.Add(time.Hour), "site.test")
	pub, tlsAddr, adm := freeAddr(t), freeAddr(t), freeAddr(t)
	startEdge(t, "serve", "--origin", originSrv.URL, "--listen", pub, "--admin-listen", adm, "--node-id", "edge-b",
		"--tls-listen", tlsAddr, "--tls-cert", cert, "--tls-key", key, "--http3")
	waitUp(t, "http://"+adm+"/readyz")
	_, port, _ := net.SplitHostPort(tlsAddr)
	common := []string{"--ignore-certificate-errors-spki-list=" + spki, "--host-resolver-rules=MAP site.test 127.0.0.1"}

	for _, tc := range []struct {
		name, path string
		extra      []string
		want       string
	}{
		{"h2", "/h2.html", []string{"--disable-quic"}, "proto=h2"},
		{"h3", "/h3.html", []string{"--enable-quic", "--origin-to-force-quic-on=site.test:" + port}, "proto=h3"},
	} {
		// Two browsers in turn (each with an empty cache): the second one's
		// request for ?again is a hit on what the first one's filled.
		for round := range 2 {
			args := append(append(append([]string{}, common...), tc.extra...), "--dump-dom", "https://site.test:"+port+tc.path)
			dom := headlessQUIC(t, bin, args...)
			i := strings.Index(dom, `<pre id="out">`)
			if i < 0 || !strings.Contains(dom[i:], tc.want) || (round == 1 && !strings.Contains(dom[i:], "status=edge-b; hit")) {
				t.Errorf("%s, browser %d: the page says %.120q, want %q (and a hit the second time)", tc.name, round+1, dom[max(i, 0):], tc.want)
			}
		}
	}
	if v := metric(t, adm, `edge_http_requests_by_protocol_total{protocol="h3"}`); v < 1 {
		t.Errorf("no HTTP/3 request counted: %v", v)
	}
	// The status page, with the HTTPS section, in the same browser.
	shot := filepath.Join(t.TempDir(), "status.png")
	dom := string(headless(t, bin, "--dump-dom", "http://"+adm+"/status"))
	for _, want := range []string{"HTTPS", "HTTP/3", "site.test"} {
		if !strings.Contains(dom, want) {
			t.Errorf("status page lacks %q", want)
		}
	}
	headless(t, bin, "--screenshot="+shot, "--window-size=1280,900", "http://"+adm+"/status")
	if st, err := os.Stat(shot); err != nil || st.Size() < 5000 {
		t.Errorf("screenshot: %v", err)
	}
}
