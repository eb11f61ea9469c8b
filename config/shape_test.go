package config

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestTheFileShapeIsChecked: what viper's merge hid, found by an
// operator's walk-through, each passing `edge config check` before.
func TestTheFileShapeIsChecked(t *testing.T) {
	cases := []struct{ name, yaml, key, reason string }{
		{"a key twice in different case", "origin: {url: http://o}\ncache:\n  max_bytes: 2MiB\n  Max_Bytes: 3GiB\n", "cache.max_bytes", `twice, as "max_bytes" and "Max_Bytes"`},
		{"a section twice in different case", "origin: {url: http://o}\nCache: {max_bytes: 2MiB}\ncache: {max_variants: 2}\n", "cache", "twice"},
		{"a key with no value", "origin: {url: http://o}\ncache:\n  max_bytes:\n", "cache.max_bytes", "has no value"},
		{"a string key with no value", "origin: {url: http://o}\nadmin:\n  token:\n", "admin.token", "has no value"},
		{"an empty section", "origin: {url: http://o}\ncache:\n", "cache", "is empty"},
		{"a section given a value", "origin: {url: http://o}\ncache: 5\n", "cache", "is a section"},
		{"a nested section given a value", "origin: {url: http://o}\ncache: {disk: /var/cache}\n", "cache.disk", "is a section"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := LoadBytes([]byte(tc.yaml))
			var ce *Error
			if !errors.As(err, &ce) {
				t.Fatalf("error %v, want a *config.Error", err)
			}
			if ce.Key != tc.key || !strings.Contains(ce.Reason, tc.reason) {
				t.Errorf("error %q, want key %s and a reason with %q", err, tc.key, tc.reason)
			}
			if strings.Contains(err.Error(), "not a known key") {
				t.Errorf("error %q also calls a known key unknown", err)
			}
		})
	}
	// What stays allowed: a key in upper case alone (keys are not
	// case-sensitive), an empty string written as one, every key of the
	// documented example.
	for _, ok := range []string{
		"origin: {url: http://o}\ncache: {MAX_BYTES: 64MiB}\n",
		"origin: {url: http://o}\nadmin: {token: \"\"}\n",
	} {
		if _, err := LoadBytes([]byte(ok)); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	if _, err := LoadBytes([]byte(Example(map[string]string{"origin.url": "http://o"}))); err != nil {
		t.Errorf("the example config: %v", err)
	}
}

// TestAFlagsErrorNamesTheFlag: a flag overriding the file's value was
// reported as coming from the file, which holds a good one.
func TestAFlagsErrorNamesTheFlag(t *testing.T) {
	file := filepath.Join(t.TempDir(), "edge.yaml")
	if err := os.WriteFile(file, []byte("origin: {url: http://o}\nlisten: 127.0.0.1:18081\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	v, err := NewViper(file)
	if err != nil {
		t.Fatal(err)
	}
	SetFlag(v, "listen", "listen", "127.0.0.1:99999")
	SetFlag(v, "cache.disk.max_bytes", "disk-size", "lots")
	_, err = Load(v)
	if err == nil {
		t.Fatal("bad flag values accepted")
	}
	for _, want := range []string{"listen: \"127.0.0.1:99999\" has no valid port (from flag --listen)", "cache.disk.max_bytes: \"lots\" is not a size", "(from flag --disk-size)"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q: want %q", err, want)
		}
	}
	if strings.Contains(err.Error(), file) {
		t.Errorf("error %q blames the file, which holds good values", err)
	}
}

// TestUnusedClusterKeysAreWarnedOf: the cluster's keys given to a node
// without peers are named, with where each came from; a node with peers,
// or without such keys, hears nothing.
func TestUnusedClusterKeysAreWarnedOf(t *testing.T) {
	for _, k := range Keys() {
		t.Setenv(k.Env(), "")
		os.Unsetenv(k.Env())
	}
	dir := t.TempDir()
	lone := filepath.Join(dir, "lone.yaml")
	if err := os.WriteFile(lone, []byte("origin: {url: http://o}\ncluster: {monitoring: all}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("EDGE_CLUSTER_STATE_DIR", dir)
	v, err := NewViper(lone)
	if err != nil {
		t.Fatal(err)
	}
	c, err := Load(v)
	if err != nil {
		t.Fatal(err)
	}
	w := UnusedKeys(v, c)
	if len(w) != 1 || !strings.Contains(w[0], "cluster.monitoring (from "+lone+")") || !strings.Contains(w[0], "cluster.state_dir (from EDGE_CLUSTER_STATE_DIR)") || !strings.Contains(w[0], "no peers") {
		t.Errorf("warnings %q: want one naming both keys and their sources", w)
	}
	t.Setenv("EDGE_CLUSTER_PEERS", "b=127.0.0.1:7946")
	t.Setenv("EDGE_CLUSTER_SECRET", "a-secret-long-enough-for-the-check")
	if v, err = NewViper(lone); err != nil {
		t.Fatal(err)
	}
	if c, err = Load(v); err != nil {
		t.Fatal(err)
	}
	if w := UnusedKeys(v, c); len(w) != 0 {
		t.Errorf("a node with peers warned %q", w)
	}
}

// TestOneRunNamesEveryMistake: the file's unknown keys stopped the check
// before any value was read, and the rules between keys stopped at the
// first one broken, so an operator fixed one mistake to meet the next (a
// walk-through's). A key the file's shape already names is not reported
// again for its value, and a whole number too large for an int is echoed
// as written, not as 1e+20.
func TestOneRunNamesEveryMistake(t *testing.T) {
	file := filepath.Join(t.TempDir(), "edge.yaml")
	yaml := "origin: {url: http://o}\nlisten: nonsense\nbogus_key: 1\n" +
		"cache:\n  max_bytes: 100000000000000000000\n  max_variants: 3\n  Max_Variants: x\n" +
		"cluster: {peers: a=127.0.0.1:1, secret: short}\n"
	if err := os.WriteFile(file, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	v, err := NewViper(file)
	if err != nil {
		t.Fatalf("the file's key errors wait for Load: %v", err)
	}
	_, err = Load(v)
	var many *Errors
	if !errors.As(err, &many) {
		t.Fatalf("error %v, want several", err)
	}
	got := map[string]string{}
	for _, e := range many.List {
		var ce *Error
		if !errors.As(e, &ce) {
			t.Fatalf("%v is not a *config.Error", e)
		}
		if _, twice := got[ce.Key]; twice {
			t.Errorf("%s reported twice: %v", ce.Key, err)
		}
		got[ce.Key] = e.Error()
	}
	want := map[string]string{
		"bogus_key":          "is not a known key",
		"cache.max_variants": "twice",
		"listen":             `"nonsense" is not host:port`,
		"cache.max_bytes":    `"100000000000000000000" is too large`,
	}
	for key, text := range want {
		if !strings.Contains(got[key], text) {
			t.Errorf("%s: got %q, want it to say %q (all: %v)", key, got[key], text, err)
		}
	}
	if len(got) != len(want) {
		t.Errorf("got %d errors, want %d: %v", len(got), len(want), err)
	}
	// The rules between keys: every one broken, once the keys themselves
	// read well.
	_, err = LoadBytes([]byte("origin: {url: ftp://o}\nlisten: 127.0.0.1:9180\ncluster: {peers: a=127.0.0.1:1, secret: short}\n"))
	for _, text := range []string{"origin.url", "admin.listen", "cluster.secret"} {
		if err == nil || !strings.Contains(err.Error(), text) {
			t.Errorf("want %s named: %v", text, err)
		}
	}
}
