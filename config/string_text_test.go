package config

import (
	"os"
	"path/filepath"
	"testing"
)

// TestStringKeysKeepTheirText: a string key written as something YAML reads
// as a number (0123 is octal 83, 1e3 is 1000, a long secret a float that
// keeps 16 digits) is the text as written, so a token or secret typed
// unquoted is the one the operator wrote, and the same as the
// environment's.
func TestStringKeysKeepTheirText(t *testing.T) {
	for _, s := range []string{"0123", "1e3", "0x1F", "12345678901234567890123", "1_000", "true", "010"} {
		c, err := LoadBytes([]byte("origin:\n  url: http://o:80\nnode_id: " + s + "\nadmin:\n  token: " + s + "\n"))
		if err != nil {
			t.Errorf("%s: %v", s, err)
			continue
		}
		if c.Admin.Token != s || c.NodeID != s {
			t.Errorf("admin.token and node_id written %s: the node uses %q and %q", s, c.Admin.Token, c.NodeID)
		}
	}
	y := "origin:\n  url: http://o:80\ncluster:\n  secret: 98765432109876543210987654321\n  selection: off\n"
	c, err := LoadBytes([]byte(y))
	if err != nil {
		t.Fatal(err)
	}
	if c.Cluster.Secret != "98765432109876543210987654321" {
		t.Errorf("cluster.secret of 29 digits became %q", c.Cluster.Secret)
	}
	if c.Cluster.Selection.String() != "off" {
		t.Errorf("cluster.selection: off became %v", c.Cluster.Selection)
	}
}

// TestEnvironmentOverridesAStringWrittenAsANumber: the text kept for a
// number-looking string is still the file's, below the environment.
func TestEnvironmentOverridesAStringWrittenAsANumber(t *testing.T) {
	file := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(file, []byte("origin:\n  url: http://o:80\nadmin:\n  token: 0123\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("EDGE_ADMIN_TOKEN", "from-env")
	v, err := NewViper(file)
	if err != nil {
		t.Fatal(err)
	}
	c, err := Load(v)
	if err != nil {
		t.Fatal(err)
	}
	if c.Admin.Token != "from-env" {
		t.Errorf("admin.token %q, want the environment's", c.Admin.Token)
	}
}
