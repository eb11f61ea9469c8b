package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
)

// runConfigCmd runs `edge config ARGS…` in-process and returns its output.
func runConfigCmd(t *testing.T, args ...string) (string, error) {
	t.Helper()
	return runCmd(configCmd(), args...)
}

// runCmd runs a command in-process and returns its output.
func runCmd(cmd *cobra.Command, args ...string) (string, error) {
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetArgs(args)
	err := cmd.Execute()
	return out.String(), err
}

func TestConfigExplainShowsRuleKeyAndLimit(t *testing.T) {
	file := filepath.Join(t.TempDir(), "edge.yaml")
	conf := `sites:
  - name: shop
    hosts: [shop.example, "*.shop.example"]
    origins: ["http://127.0.0.1:8090"]
    rate_limit: {rate: 20, burst: 50}
    rules:
      - {name: logged-in, match: {cookie: wordpress_logged_in_*}, bypass: true}
      - {name: e404, match: {status: [404]}, ttl: 30s}
      - {name: pages, default_ttl: 5m, key: {ignore_params: [utm_*]}, client_no_cache: coalesce, revalidate_interval: 5s}
`
	if err := os.WriteFile(file, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := runConfigCmd(t, "explain", "-c", file, "https://WWW.Shop.Example:443/blog/?utm_source=x&id=7")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"site      shop", "rule      pages (rules[2])", "default_ttl 5m0s",
		"cache key shop http://www.shop.example/blog/?id=7", "coalesce (one revalidation per 5s)", "20 requests/s per client (address), burst 50"} {
		if !strings.Contains(out, want) {
			t.Errorf("explain lacks %q:\n%s", want, out)
		}
	}
	out, _ = runConfigCmd(t, "explain", "-c", file, "--cookie", "wordpress_logged_in_x=1", "http://shop.example/")
	if !strings.Contains(out, "rule      logged-in") || !strings.Contains(out, "bypass") {
		t.Errorf("explain with a cookie:\n%s", out)
	}
	out, _ = runConfigCmd(t, "explain", "-c", file, "http://other.example/")
	if !strings.Contains(out, "no site answers it (421") {
		t.Errorf("explain of an unknown host:\n%s", out)
	}
	if _, err := runConfigCmd(t, "explain", "-c", file, "not a url"); err == nil {
		t.Error("explain accepted a non-URL")
	}
}

func TestConfigCheckNamesTheRuleField(t *testing.T) {
	file := filepath.Join(t.TempDir(), "edge.yaml")
	if err := os.WriteFile(file, []byte("origin:\n  url: http://127.0.0.1:1\nrules:\n  - {name: a, tll: 5m}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := runConfigCmd(t, "check", file)
	if err == nil || !strings.Contains(err.Error(), "rules[0].tll") || !strings.Contains(err.Error(), `did you mean "ttl"`) {
		t.Fatalf("check: %v", err)
	}
}

// config check takes the file as its argument or with -c, as serve,
// explain and health do (a new user's -c was "unknown shorthand flag").
func TestConfigCheckTakesTheFileEitherWay(t *testing.T) {
	file := filepath.Join(t.TempDir(), "edge.yaml")
	if err := os.WriteFile(file, []byte("origin:\n  url: http://127.0.0.1:1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"check", file}, {"check", "-c", file}} {
		if out, err := runConfigCmd(t, args...); err != nil || !strings.Contains(out, file+": ok") {
			t.Errorf("%v: %q, %v", args, out, err)
		}
	}
	// A misspelt variable is warned of, as serve does (a new user's
	// EDGE_CACHE_MAXBYTES was ignored behind an "ok").
	t.Setenv("EDGE_CACHE_MAXBYTES", "1")
	if out, err := runConfigCmd(t, "check", file); err != nil || !strings.Contains(out, "did you mean EDGE_CACHE_MAX_BYTES") {
		t.Errorf("check with EDGE_CACHE_MAXBYTES set: %q, %v", out, err)
	}
	// A rule a catch-all before it hides is valid and warned of.
	hidden := filepath.Join(t.TempDir(), "hidden.yaml")
	if err := os.WriteFile(hidden, []byte("origin:\n  url: http://127.0.0.1:1\nrules:\n  - {name: all, ttl: 1m}\n  - {name: img, match: {path: /img/}, ttl: 1h}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := runConfigCmd(t, "check", hidden); err != nil || !strings.Contains(out, `warning: rules[1] ("img") is never used`) || !strings.Contains(out, hidden+": ok") {
		t.Errorf("check with a hidden rule: %q, %v", out, err)
	}
	for _, args := range [][]string{{"check"}, {"check", "-c", file, file}} {
		if _, err := runConfigCmd(t, args...); err == nil {
			t.Errorf("%v: accepted", args)
		}
	}
}

// TestHealthAndReloadCommands runs `edge health` and `edge reload`
// against a real node.
func TestHealthAndReloadCommands(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	origin, pub, adm := freeAddr(t), freeAddr(t), freeAddr(t)
	startOrigin(t, origin, "1ms")
	file := filepath.Join(t.TempDir(), "edge.yaml")
	if err := os.WriteFile(file, []byte("origin:\n  url: http://"+origin+"\nrules: [{name: a, default_ttl: 1m}]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	startEdge(t, "serve", "-c", file, "--listen", pub, "--admin-listen", adm, "--admin-token", "tok")
	waitUp(t, "http://"+adm+"/readyz")
	run := runCmd
	if out, err := run(healthCmd(), "--admin", adm); err != nil || !strings.Contains(out, "ready") {
		t.Fatalf("health of a ready node: %q %v", out, err)
	}
	withAdmin := filepath.Join(t.TempDir(), "admin.yaml")
	if err := os.WriteFile(withAdmin, []byte("admin:\n  listen: \"0.0.0.0:"+strings.Split(adm, ":")[1]+"\"\n  token: tok\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := run(healthCmd(), "-c", withAdmin); err != nil || !strings.Contains(out, "ready") {
		t.Fatalf("health with the node's config file: %q %v", out, err)
	}
	if out, err := run(reloadCmd(), "-c", withAdmin); err != nil || !strings.Contains(out, "reloaded") {
		t.Fatalf("reload with the token from the config file: %q %v", out, err)
	}
	if _, err := run(healthCmd(), "--admin", freeAddr(t), "--timeout", "500ms"); err == nil {
		t.Error("health of no node succeeded")
	}
	if out, err := run(reloadCmd(), "--admin", adm, "--token", "tok"); err != nil || !strings.Contains(out, "reloaded: config") {
		t.Fatalf("reload: %q %v", out, err)
	}
	if err := os.WriteFile(file, []byte("origin:\n  url: http://"+origin+"\nrules: [{name: a, tll: 1m}]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := run(reloadCmd(), "--admin", adm, "--token", "tok"); err == nil || !strings.Contains(err.Error(), "rules[0].tll") {
		t.Fatalf("a refused reload must name the key: %v", err)
	}
	if _, err := run(reloadCmd(), "--admin", adm, "--token", "wrong"); err == nil {
		t.Error("reload with a wrong token succeeded")
	}
	// The file's token edited after the start: the node keeps its own, and
	// the refusal says why (an operator's walk-through got a bare 401).
	edited := filepath.Join(t.TempDir(), "edited.yaml")
	if err := os.WriteFile(edited, []byte("admin:\n  listen: \""+adm+"\"\n  token: newtok\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := run(reloadCmd(), "-c", edited); err == nil || !strings.Contains(err.Error(), "cannot change without a restart") {
		t.Errorf("reload with an edited token in the file: %v, want the hint", err)
	}
}

// TestConfigCheckReadsTheCertificates: `config check` refuses the TLS
// files a start refuses, naming the key (an operator's walk-through found
// "ok" for a key that did not match its certificate, a missing file and
// an expired certificate, each of which then stopped serve).
func TestConfigCheckReadsTheCertificates(t *testing.T) {
	dir := t.TempDir()
	ca := newTestCA(t)
	now := time.Now()
	goodCrt, goodKey, _ := ca.leaf(t, dir, "good", 2, now.Add(-time.Hour), now.Add(time.Hour), "a.test")
	_, otherKey, _ := ca.leaf(t, dir, "other", 3, now.Add(-time.Hour), now.Add(time.Hour), "b.test")
	oldCrt, oldKey, _ := ca.leaf(t, dir, "old", 4, now.Add(-3*time.Hour), now.Add(-time.Hour), "a.test")
	for _, c := range []struct {
		name, tls, want string
	}{
		{"good", "tls: {listen: '127.0.0.1:1', cert_file: '" + goodCrt + "', key_file: '" + goodKey + "'}", ""},
		{"other key", "tls: {listen: '127.0.0.1:1', cert_file: '" + goodCrt + "', key_file: '" + otherKey + "'}", "tls.cert_file"},
		{"missing", "tls: {listen: '127.0.0.1:1', cert_file: '" + filepath.Join(dir, "none.crt") + "', key_file: '" + goodKey + "'}", "tls.cert_file"},
		{"expired", "tls: {listen: '127.0.0.1:1', cert_file: '" + oldCrt + "', key_file: '" + oldKey + "'}", "expired"},
		{"admin", "admin: {listen: '127.0.0.1:2', tls: {cert_file: '" + goodCrt + "', key_file: '" + otherKey + "'}}", "admin.tls.cert_file"},
	} {
		file := filepath.Join(dir, strings.ReplaceAll(c.name, " ", "-")+".yaml")
		if err := os.WriteFile(file, []byte("origin:\n  url: http://127.0.0.1:1\n"+c.tls+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		out, err := runConfigCmd(t, "check", file)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: %v", c.name, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s: %q, %v; want an error naming %s", c.name, out, err, c.want)
		}
	}
}

// TestAdminCommandsSayTheFileDoesNotParse: `edge reload -c FILE` and
// `edge health -c FILE` with a file that does not parse say so, instead
// of trying the default admin address and reporting its "connection
// refused" (an operator's walk-through).
func TestAdminCommandsSayTheFileDoesNotParse(t *testing.T) {
	file := filepath.Join(t.TempDir(), "edge.yaml")
	if err := os.WriteFile(file, []byte("admin: {listen: 127.0.0.1:1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, cmd := range []*cobra.Command{reloadCmd(), healthCmd()} {
		_, err := runCmd(cmd, "-c", file)
		if err == nil || !strings.Contains(err.Error(), "admin listener is not known from "+file) || strings.Contains(err.Error(), "connection refused") {
			t.Errorf("%s -c with a broken file: %v", cmd.Name(), err)
		}
	}
}
