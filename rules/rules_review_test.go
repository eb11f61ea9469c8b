package rules

import (
	"net/http"
	"regexp"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

// A glob's * fails to match when the path has a literal '*' where the star is.
func TestReviewGlobStarAgainstLiteralStar(t *testing.T) {
	for _, tc := range []struct{ glob, path string }{
		{"/admin/*", "/admin/*x"},
		{"/img/*.png", "/img/*a.png"},
		{"/api/*/private", "/api/*x/private"},
	} {
		if !globMatch(tc.glob, tc.path) {
			t.Errorf("globMatch(%q, %q) = false, want true", tc.glob, tc.path)
		}
	}
	s := mustParse(t, `[{name: priv, match: {path: "/private/*"}, bypass: true}, {name: rest, ttl: 1h}]`)
	for _, p := range []string{"/private/x", "/private/*x", "/private/%2Ax"} {
		if r := s.ForRequest("GET", p, nil); r == nil || r.Name != "priv" {
			t.Errorf("%s: rule %v, want priv (bypass)", p, r)
		}
	}
}

// "HEAD matches where GET does": a rule for [HEAD] must match HEAD.
func TestReviewMethodsHEAD(t *testing.T) {
	s := mustParse(t, `[{name: h, match: {methods: [HEAD]}, bypass: true}]`)
	if r := s.ForRequest("HEAD", "/a", nil); r == nil {
		t.Error("a rule with methods [HEAD] does not match a HEAD request")
	}
}

func TestReviewRegexLiteralPrefix(t *testing.T) {
	for _, tc := range []struct{ re, path string }{
		{`(?i)/ADMIN/`, "/admin/x"},
		{`^(?i)/ADMIN/`, "/admin/x"},
		{`^/a{0}b`, "/b"},
		{`^/a*`, "/"},
		{`\.(css|js)$`, "/x.js"},
		{`^\Q/a.b\E`, "/a.b"},
		{`^[/]admin`, "/admin"},
		{`^/(?:a|b)x`, "/bx"},
	} {
		s, err := parseYAML(t, `[{name: r, match: {path_regex: '`+tc.re+`'}}]`)
		if err != nil {
			t.Fatal(err)
		}
		want := regexp.MustCompile(tc.re).MatchString(tc.path)
		got := s.ForRequest("GET", tc.path, nil) != nil
		if got != want {
			t.Errorf("%s on %s: %v, regexp says %v (lit %q anchored %v)", tc.re, tc.path, got, want, s.Rules[0].reLit, s.Rules[0].reAnchored)
		}
	}
}

// A duration given in seconds overflows time.Duration and lands in range.
func TestReviewDurationOverflow(t *testing.T) {
	// x*1e9 ≡ 60e9 (mod 2^64)
	const x = 18446744133 // placeholder replaced below
	_ = x
	var v any
	_ = yaml.Unmarshal([]byte(`[{name: a, ttl: 36028797018963970}]`), &v)
	s, err := Parse("rules", v)
	if err == nil {
		t.Errorf("ttl 36028797018963970 (seconds) accepted as %v", s.Rules[0].Lifetime.TTL)
	}
}

// Odd YAML must never panic Parse.
func TestReviewParseOddValues(t *testing.T) {
	srcs := []string{
		`[{name: a, match: }]`, `[{name: a, match: {path: }}]`, `[{name: a, match: {status: }}]`,
		`[{name: a, match: {status: []}}]`, `[{name: a, match: {status: [[404]]}}]`, `[{name: a, match: {methods: [1]}}]`,
		`[{name: a, match: {methods: []}}]`, `[{name: a, match: {cookie: 1}}]`, `[{name: a, key: }]`, `[{name: a, key: {headers: }}]`,
		`[{name: a, key: {sort_params: }}]`, `[{name: a, key: {cookies: [1]}}]`, `[{name: a, request_headers: }]`,
		`[{name: a, request_headers: {set: }}]`, `[{name: a, request_headers: {set: {X-A: }}}]`, `[{name: a, request_headers: {set: {X-A: [1, 2]}}}]`,
		`[{name: a, request_headers: {set: {X-A: {b: c}}}}]`, `[{name: a, request_headers: {remove: }}]`,
		`[{name: a, response_headers: {remove: [1]}}]`, `[{name: a, client_no_cache: }]`, `[{name: a, client_no_cache: 1}]`,
		`[{name: a, revalidate_interval: 1s}]`, `[{name: a, client_no_cache: coalesce, revalidate_interval: }]`,
		`[{name: a, ttl: }]`, `[{name: a, ttl: 1.5}]`, `[{name: a, ttl: "d"}]`, `[{name: a, ttl: "-1d"}]`, `[{name: a, ttl: 99999999999999999999}]`,
		`[{name: a, ttl: "9999999999999d"}]`, `[{name: a, ttl: .nan}]`, `[{name: a, min_ttl: .inf}]`,
		`[{1: a}]`, `[{name: 1}]`, `[{name: a, match: {1: a}}]`, `[~]`, `[[]]`, `[{}]`, `[{name: a, key: {1: b}}]`,
		`[{name: a, match: {path_regex: 1}}]`, `[{name: a, match: {path_regex: "^"}}]`, `[{name: a, match: {path_regex: "^("}}]`,
		`[{name: a, match: {path_regex: "^$"}}]`, `[{name: a, match: {path: "*"}}]`, `[{name: a, match: {path: "?"}}]`,
		`[{name: a, match: {path: "/**?*"}}]`, `[{name: a, match: {cookie: "*"}}]`,
	}
	for _, src := range srcs {
		var v any
		if err := yaml.Unmarshal([]byte(src), &v); err != nil {
			t.Logf("%s: yaml %v", src, err)
			continue
		}
		func() {
			defer func() {
				if p := recover(); p != nil {
					t.Errorf("%s: panic %v", src, p)
				}
			}()
			s, err := Parse("rules", v)
			if err == nil && s != nil {
				for _, r := range s.Rules {
					_ = r.Explain()
					_ = r.KeyQuery("a=1&&=&%zz=1&utm_x&b")
					_ = r.KeyExtra(http.Header{"Cookie": {"a"}})
				}
				s.ForRequest("GET", "/%zz", http.Header{"Cookie": {";;="}})
				s.ForResponse("GET", "", nil, 200)
				t.Logf("%s: accepted: %+v", src, s.Rules[0].Request)
			}
		}()
	}
	_ = time.Second
}

func FuzzGlob(f *testing.F) {
	f.Add("/a/*b?c", "/a/xxbyc")
	f.Fuzz(func(t *testing.T, g, p string) {
		got := globMatch(g, p)
		// reference: translate to a regexp
		re := "^"
		for i := 0; i < len(g); i++ {
			switch g[i] {
			case '*':
				re += "(?s:.*)"
			case '?':
				re += "(?s:.)"
			default:
				re += regexp.QuoteMeta(string(g[i]))
			}
		}
		re += "$"
		rx, err := regexp.Compile(re)
		if err != nil {
			return
		}
		// '?' is one byte in globMatch; compare only on ASCII
		for i := 0; i < len(p); i++ {
			if p[i] >= 0x80 {
				return
			}
		}
		for i := 0; i < len(g); i++ {
			if g[i] >= 0x80 {
				return
			}
		}
		if want := rx.MatchString(p); got != want {
			t.Fatalf("globMatch(%q, %q) = %v, want %v", g, p, got, want)
		}
	})
}

func FuzzKeyQuery(f *testing.F) {
	f.Add("a=1&utm_b=2&&c")
	s := &Rule{Name: "r", Query: Query{Ignore: []string{"utm_*"}, Allow: []string{"a", "c*", "utm_b"}, Sort: true}}
	f.Fuzz(func(t *testing.T, q string) {
		_ = s.KeyQuery(q)
		_ = decodedPath(q)
		_ = (&Set{Rules: []*Rule{s}}).ForRequest("GET", q, http.Header{"Cookie": {q}})
	})
}
