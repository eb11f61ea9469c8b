package main

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// staticOrigin is a plain static file server as an operator meets one
// (Python's http.server): no caching headers, no Range support.
type staticOrigin struct {
	srv   *httptest.Server
	mu    sync.Mutex
	calls map[string]int
	big   []byte
}

func newStaticOrigin(t *testing.T) *staticOrigin {
	o := &staticOrigin{calls: map[string]int{}, big: bytes.Repeat([]byte("0123456789abcdef"), 5<<20/16)}
	o.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		o.mu.Lock()
		o.calls[r.URL.Path]++
		o.mu.Unlock()
		if r.URL.Path == "/big.bin" {
			w.Header().Set("Content-Type", "application/octet-stream")
			w.Header().Set("Content-Length", strconv.Itoa(len(o.big)))
			_, _ = w.Write(o.big)
			return
		}
		w.Header().Set("Content-Type", "text/html")
		_, _ = fmt.Fprintf(w, "<html><body>%s</body></html>", r.URL.Path)
	}))
	t.Cleanup(o.srv.Close)
	return o
}

func (o *staticOrigin) count(path string) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.calls[path]
}

// TestStaticSiteJourneyWithRules is the operator's journey of the cache
// rules issue, through a real edge process: pages without caching headers
// cached for the rule's default TTL, hard reloads answered from the cache,
// a ranged first request to an origin without ranges costing one fetch,
// a per-client rate limit, and rules changed by a reload.
func TestStaticSiteJourneyWithRules(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	o := newStaticOrigin(t)
	pub, adm := freeAddr(t), freeAddr(t)
	file := filepath.Join(t.TempDir(), "edge.yaml")
	write := func(rules string) {
		conf := fmt.Sprintf("listen: %q\nadmin:\n  listen: %q\nnode_id: \"edge-rules\"\norigin:\n  url: %q\nlimits:\n  rate: 20\n  rate_burst: 30\nrules:\n%s",
			pub, adm, o.srv.URL, rules)
		if err := os.WriteFile(file, []byte(conf), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("  - {name: pages, default_ttl: 5m}\n")
	node := startEdge(t, "serve", "-c", file)
	waitUp(t, "http://"+adm+"/readyz")
	base := "http://" + pub
	get := func(path string, hdr ...string) *http.Response {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, base+path, nil)
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		resp.Body = io.NopCloser(bytes.NewReader(body))
		return resp
	}

	// HTML without caching headers is cached for the rule's default TTL.
	get("/index.html")
	if cs := get("/index.html").Header.Get("Cache-Status"); cs != "edge-rules; hit" {
		t.Errorf("second request: Cache-Status %q", cs)
	}
	// A browser's hard reload does not reach the origin (cache.client_no_cache: ignore).
	for range 8 {
		get("/index.html", "Cache-Control", "no-cache", "Pragma", "no-cache")
	}
	if n := o.count("/index.html"); n != 1 {
		t.Errorf("the origin saw /index.html %d times after 8 hard reloads, want 1", n)
	}
	// A ranged first request to an origin without ranges: one fetch, and
	// the file is cached.
	r := get("/big.bin", "Range", "bytes=3000000-3000099")
	body, _ := io.ReadAll(r.Body)
	if r.StatusCode != http.StatusPartialContent || !bytes.Equal(body, o.big[3000000:3000100]) {
		t.Errorf("ranged first request: %d, %d bytes", r.StatusCode, len(body))
	}
	if r := get("/big.bin", "Range", "bytes=0-9"); !strings.Contains(r.Header.Get("Cache-Status"), "hit") {
		t.Errorf("second range: %q", r.Header.Get("Cache-Status"))
	}
	if n := o.count("/big.bin"); n != 1 {
		t.Errorf("the origin saw /big.bin %d times, want 1", n)
	}
	// The per-client rate limit: a burst beyond limits.rate_burst is
	// refused with 429 and Retry-After, and counted.
	limited := 0
	for range 60 {
		if r := get("/index.html"); r.StatusCode == http.StatusTooManyRequests {
			limited++
			if r.Header.Get("Retry-After") == "" || r.Header.Get("Cache-Status") != "edge-rules; detail=rate-limited" || r.Header.Get("Via") != "1.1 edge-rules" {
				t.Errorf("a 429 without Retry-After, Cache-Status or Via: %v", r.Header)
			}
		}
	}
	if limited == 0 {
		t.Error("60 requests at once were all answered under a 20/s limit with a burst of 30")
	}
	if got := metric(t, adm, `edge_rate_limited_total{site="default"}`); got != float64(limited) {
		t.Errorf("edge_rate_limited_total %v, refused %d", got, limited)
	}
	if got := metric(t, adm, `edge_rule_requests_total{result="hit",rule="pages",site="default"}`); got < 2 {
		t.Errorf("rule hits counted: %v", got)
	}
	// Rules change with a reload: /index.html now bypasses the cache.
	write("  - {name: fresh, match: {path: /index.html}, bypass: true}\n  - {name: pages, default_ttl: 5m}\n")
	before := metric(t, adm, `edge_config_reloads_total{result="ok"}`)
	_ = node.Process.Signal(syscall.SIGHUP)
	waitFor(t, "the reload", 60*time.Second, func() bool { return metric(t, adm, `edge_config_reloads_total{result="ok"}`) > before })
	// (A reload makes new limiters: every client's bucket starts full.)
	was := o.count("/index.html")
	get("/index.html")
	get("/index.html")
	if n := o.count("/index.html"); n != was+2 {
		t.Errorf("after the reload, two requests reached the origin %d times, want 2", n-was)
	}
	// The status page shows the rules.
	resp, err := http.Get("http://" + adm + "/status.json")
	if err != nil {
		t.Fatal(err)
	}
	st, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(st), `"name":"fresh"`) || !strings.Contains(string(st), `"rate_limit":"20/s per address, burst 30"`) {
		t.Errorf("status page lacks the rules or the rate limit: %.600s", st)
	}
}
