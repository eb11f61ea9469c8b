package deploy

import (
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// TestMakeFuzzListsEveryTarget: `make fuzz` runs every fuzz function of the
// repository, so a new parser's fuzz target cannot be left out of it.
func TestMakeFuzzListsEveryTarget(t *testing.T) {
	mk, err := os.ReadFile("../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?s)FUZZ_TARGETS := (.*?)\nfuzz:`).FindSubmatch(mk)
	if m == nil {
		t.Fatal("no FUZZ_TARGETS in the Makefile")
	}
	listed := map[string]bool{}
	for _, f := range strings.Fields(strings.ReplaceAll(string(m[1]), "\\", " ")) {
		listed[f] = true
	}
	fuzzFunc := regexp.MustCompile(`(?m)^func (Fuzz\w+)\(`)
	var missing []string
	_ = filepath.WalkDir("..", func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") && p != ".." || d.Name() == "node_modules" || d.Name() == "bench") {
			return filepath.SkipDir
		}
		if !strings.HasSuffix(p, "_test.go") {
			return nil
		}
		b, _ := os.ReadFile(p)
		for _, fm := range fuzzFunc.FindAllSubmatch(b, -1) {
			pkg, _ := filepath.Rel("..", filepath.Dir(p))
			if target := filepath.ToSlash(pkg) + ":" + string(fm[1]); !listed[target] {
				missing = append(missing, target)
			}
		}
		return nil
	})
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Fatalf("FUZZ_TARGETS in the Makefile misses %v", missing)
	}
}
