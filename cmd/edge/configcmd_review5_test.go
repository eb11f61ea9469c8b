package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// pick now gives _ambiguous-path to a path whose case a case-insensitive
// origin reads as another rule's (/API/me beside a bypass of /api/), but
// explain still says every such path "has dot or empty segments": an
// operator asking why /API/me is never cached is told something false of
// a path that has neither.
func TestConfigExplainNamesTheCaseAmbiguity(t *testing.T) {
	file := filepath.Join(t.TempDir(), "edge.yaml")
	conf := `sites:
  - name: shop
    hosts: [shop.example]
    origins: ["http://127.0.0.1:8090"]
    rules:
      - {name: api, match: {path: /api/}, bypass: true}
      - {name: pages, default_ttl: 5m}
`
	if err := os.WriteFile(file, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := runConfigCmd(t, "explain", "-c", file, "http://shop.example/API/me")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "_ambiguous-path") {
		t.Fatalf("control: /API/me is not ambiguous:\n%s", out)
	}
	if strings.Contains(out, "dot or empty segments") {
		t.Errorf("explain gives /API/me (no dot or empty segment) the dot-segment reason:\n%s", out)
	}
}
