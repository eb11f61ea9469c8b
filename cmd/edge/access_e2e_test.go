package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// accessLines parses every JSON line of the files.
func accessLines(t *testing.T, files ...string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, f := range files {
		fh, err := os.Open(f)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(fh)
		for sc.Scan() {
			var m map[string]any
			if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
				t.Fatalf("%s: a line that is not JSON: %q", f, sc.Text())
			}
			out = append(out, m)
		}
		fh.Close()
	}
	return out
}

// TestAccessLog: one JSON line per request with the fields operators
// read, and a logrotate-style rename plus SIGUSR1 loses no line.
func TestAccessLog(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	origin, pub, adm := freeAddr(t), freeAddr(t), freeAddr(t)
	startOrigin(t, origin, "1ms")
	logFile := filepath.Join(t.TempDir(), "access.log")
	conf := fmt.Sprintf("listen: %q\nadmin:\n  listen: %q\nnode_id: \"edge-log\"\nlog:\n  access: %q\nsites:\n  - name: shop\n    hosts: [\"shop.test\"]\n    origins: [\"http://%s\"]\n", pub, adm, logFile, origin)
	file := filepath.Join(t.TempDir(), "edge.yaml")
	if err := os.WriteFile(file, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	node := startEdge(t, "serve", "-c", file)
	waitUp(t, "http://"+adm+"/readyz")
	send := func(n int, tag string) {
		for i := range n {
			getHost(t, fmt.Sprintf("http://%s/p/%d?%s", pub, i%5, tag), "shop.test")
		}
	}
	send(30, "a")
	getHost(t, "http://"+pub+"/p/1", "nobody.test") // 421, logged too
	waitFor(t, "31 lines", 60*time.Second, func() bool { return len(accessLines(t, logFile)) == 31 })
	lines := accessLines(t, logFile)
	first, last := lines[0], lines[30]
	for _, k := range []string{"time", "client", "site", "method", "url", "status", "bytes", "duration_ms", "cache", "upstream", "upstream_addr", "upstream_ms"} {
		if _, ok := first[k]; !ok {
			t.Errorf("the first line (a miss) lacks %q: %v", k, first)
		}
	}
	if first["site"] != "shop" || first["cache"] != "miss" || first["upstream"] != "origin" || first["status"] != 200.0 {
		t.Errorf("first line: %v", first)
	}
	if lines[5]["cache"] != "hit" {
		t.Errorf("the sixth request (a repeat) is not logged as a hit: %v", lines[5])
	}
	if last["status"] != 421.0 || last["site"] != "-" {
		t.Errorf("the misdirected request: %v", last)
	}
	// logrotate: rename, more requests, SIGUSR1, more requests.
	rotated := logFile + ".1"
	if err := os.Rename(logFile, rotated); err != nil {
		t.Fatal(err)
	}
	send(20, "b")
	_ = node.Process.Signal(syscall.SIGUSR1)
	time.Sleep(200 * time.Millisecond)
	send(25, "c")
	waitFor(t, "every line", 60*time.Second, func() bool { return len(accessLines(t, logFile, rotated)) == 76 })
	if n := len(accessLines(t, logFile)); n < 25 {
		t.Errorf("the reopened file has %d lines, want at least the 25 sent after SIGUSR1", n)
	}
	if v := metric(t, adm, "edge_access_log_dropped_total"); v != 0 {
		t.Errorf("dropped lines: %v", v)
	}
}
