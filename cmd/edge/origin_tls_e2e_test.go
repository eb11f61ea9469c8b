package main

import (
	"context"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestOriginServesHTTPS: `edge origin --tls-cert --tls-key` serves the
// demo site over https, and a node with origin.ca_file fetches and caches
// through it (the two-continent lab's far origin behind TLS).
func TestOriginServesHTTPS(t *testing.T) {
	dir := t.TempDir()
	ca := newTestCA(t)
	crt, key, _ := ca.leaf(t, dir, "origin", 2, time.Now().Add(-time.Hour), time.Now().Add(time.Hour), "origin.test")
	caFile := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(caFile, ca.pem, 0o600); err != nil {
		t.Fatal(err)
	}
	originAddr, pub, adm := freeAddr(t), freeAddr(t), freeAddr(t)
	startEdge(t, "origin", "--listen", originAddr, "--latency", "0s", "--jitter", "0s", "--tls-cert", crt, "--tls-key", key)
	cmd := exec.Command(os.Args[0], "serve", "--origin", "https://"+originAddr, "--listen", pub, "--admin-listen", adm, "--log-level", "warn")
	cmd.Env = append(os.Environ(), "EDGE_TEST_AS_MAIN=1", "EDGE_ORIGIN_CA_FILE="+caFile, "EDGE_ORIGIN_SERVER_NAME=origin.test")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	waitUp(t, "http://"+pub+"/size/10")
	// The first request fills the page from the https origin; later ones
	// are hits once the fill is stored (on a loaded machine the first
	// client can have its answer a moment before the store has it: a
	// request then joins the fill, "collapsed").
	first := fetchStatus(t, "http://"+pub+"/size/512")
	if !strings.Contains(first, "stored") {
		t.Errorf("first request's Cache-Status %q: want a fill from the origin, stored", first)
	}
	waitFor(t, "a hit for the page fetched over https", 10*time.Second, func() bool {
		return strings.HasSuffix(fetchStatus(t, "http://"+pub+"/size/512"), "hit")
	})
}

// fetchStatus GETs url, wants a 200, and returns its Cache-Status.
func fetchStatus(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%s through the https origin: %s", url, resp.Status)
	}
	return resp.Header.Get("Cache-Status")
}

// TestOriginTLSFlagsAreChecked: a certificate without its key, or a pair
// that does not load, stops the origin at start with the flag named.
func TestOriginTLSFlagsAreChecked(t *testing.T) {
	dir := t.TempDir()
	bogus := filepath.Join(dir, "bogus.pem")
	if err := os.WriteFile(bogus, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	ca := newTestCA(t)
	crtA, _, _ := ca.leaf(t, dir, "a", 2, time.Now().Add(-time.Hour), time.Now().Add(time.Hour), "a.test")
	_, keyB, _ := ca.leaf(t, dir, "b", 3, time.Now().Add(-time.Hour), time.Now().Add(time.Hour), "b.test")
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"cert alone", []string{"--tls-cert", bogus}, "--tls-cert and --tls-key go together"},
		{"key alone", []string{"--tls-key", bogus}, "--tls-cert and --tls-key go together"},
		{"a pair that does not load", []string{"--tls-cert", bogus, "--tls-key", bogus}, "--tls-cert/--tls-key"},
		{"a missing file", []string{"--tls-cert", filepath.Join(dir, "none.pem"), "--tls-key", bogus}, "--tls-cert/--tls-key"},
		{"a key that is not the certificate's", []string{"--tls-cert", crtA, "--tls-key", keyB}, "--tls-cert/--tls-key"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"origin", "--listen", freeAddr(t)}, tc.args...)
			// An origin that started anyway would serve until killed:
			// the deadline turns that into a failure, not a hung run.
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, os.Args[0], args...)
			cmd.Env = append(os.Environ(), "EDGE_TEST_AS_MAIN=1")
			out, err := cmd.CombinedOutput()
			if err == nil {
				t.Fatalf("origin started with %v", tc.args)
			}
			if !strings.Contains(string(out), tc.want) {
				t.Errorf("error %q does not say %q", out, tc.want)
			}
		})
	}
}
