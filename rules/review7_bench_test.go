package rules

import (
	"fmt"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// trap50: 50 rules, a third regular expressions of the kind docs/rules.md
// shows ('\.(css|js)$'), whose literal (".") every page holds, so the
// folded scan's prefilter lets each through.
func trap50(b testing.TB) *Set {
	var sb strings.Builder
	sb.WriteString("[")
	for i := 0; i < 48; i++ {
		switch i % 3 {
		case 0:
			fmt.Fprintf(&sb, "{name: p%d, match: {path: /prefix%d/}, ttl: 1m},", i, i)
		case 1:
			fmt.Fprintf(&sb, "{name: g%d, match: {path: '/glob%d/*.css'}, ttl: 1m},", i, i)
		case 2:
			fmt.Fprintf(&sb, "{name: r%d, match: {path_regex: '\\.(css%d|js%d)$'}, ttl: 1m},", i, i, i)
		}
	}
	sb.WriteString("{name: api, match: {path: /api/}, bypass: true},{name: last, default_ttl: 5m}]")
	var v any
	if err := yaml.Unmarshal([]byte(sb.String()), &v); err != nil {
		b.Fatal(err)
	}
	s, err := Parse("rules", v)
	if err != nil {
		b.Fatal(err)
	}
	return s
}

func benchTrap(b *testing.B, path string) {
	s := trap50(b)
	b.ReportAllocs()
	b.SetBytes(int64(len(path)))
	for b.Loop() {
		if r := s.ForRequest("GET", path, nil); r == nil || r.Name != "last" {
			b.Fatal(r)
		}
	}
}

var longPage = "/" + strings.Repeat("Some-Page.", 800) + "html" // 8 KB, the URL limit

func BenchmarkRegexTrapLong(b *testing.B)      { benchTrap(b, longPage) }
func BenchmarkRegexTrapLongLower(b *testing.B) { benchTrap(b, strings.ToLower(longPage)) }
func BenchmarkRegexTrapShort(b *testing.B)     { benchTrap(b, "/some/page/path/Index.html") }
func BenchmarkRegexTrapShortLower(b *testing.B) {
	benchTrap(b, "/some/page/path/index.html")
}

// exactOnly is the cost of the exact match alone, for comparison.
func BenchmarkRegexTrapLongExactOnly(b *testing.B) {
	s := trap50(b)
	b.SetBytes(int64(len(longPage)))
	for b.Loop() {
		_ = s.ForResponse("GET", longPage, nil, 200)
	}
}

// docs/rules.md: "no allocation" for a lower-case path (the hit path asks
// ForKey on every hit and a hit allocates nothing). With the docs' own
// regex example, any path with a dot passes the "." prefilter, and the
// upper-case spelling is made: one allocation per look-up, and each
// regex run three more times over a path that has no capital at all.
func TestLowerCasePathWithTheDocsRegexAllocatesNothing(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector's sync.Pool drops regexp's machines: allocations are counted without it (make bench, make fuzz, go test without -race)")
	}
	s, err := parseSrc(t, `[{name: api, match: {path: /api/}, bypass: true}, {name: static, match: {path_regex: '\.(css|js)$'}, ttl: 1h}, {name: pages, default_ttl: 5m}]`)
	if err != nil {
		t.Fatal(err)
	}
	if n := testing.AllocsPerRun(100, func() {
		_ = s.ForKey("/blog/post-7.html", "")
		_ = s.ForRequest("HEAD", "/blog/post-7.html", nil)
	}); n != 0 {
		t.Errorf("%v allocations per look-up of a lower-case path", n)
	}
}
