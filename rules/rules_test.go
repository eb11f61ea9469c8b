package rules

import (
	"fmt"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

// parseYAML compiles rules written as the config file writes them.
func parseYAML(t testing.TB, src string) (*Set, error) {
	t.Helper()
	var v any
	if err := yaml.Unmarshal([]byte(src), &v); err != nil {
		t.Fatalf("yaml: %v", err)
	}
	return Parse("rules", v)
}

func mustParse(t testing.TB, src string) *Set {
	t.Helper()
	s, err := parseYAML(t, src)
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	return s
}

func TestParseRefusesMalformedRulesNamingRuleAndField(t *testing.T) {
	for _, tc := range []struct{ src, key, reason string }{
		{`x`, "rules", "YAML list of rules"},
		{`{a: 1}`, "rules", "not a list"},
		{`[1]`, "rules[0]", "not a rule"},
		{`[{match: {path: /a}}]`, "rules[0].name", "required"},
		{`[{name: Bad Name}]`, "rules[0].name", "lower-case"},
		{`[{name: a}, {name: a}]`, "rules[1].name", "names two rules"},
		{`[{name: a, tll: 1h}]`, "rules[0].tll", `did you mean "ttl"`},
		{`[{name: a, match: {path: static/}}]`, "rules[0].match.path", "must start with /"},
		{`[{name: a, match: {path: /a, path_regex: ^/a}}]`, "rules[0].match.path_regex", "exclude"},
		{`[{name: a, match: {path_regex: "(("}}]`, "rules[0].match.path_regex", "does not compile"},
		{`[{name: a, match: {status: [99]}}]`, "rules[0].match.status[0]", "status code"},
		{`[{name: a, match: {status: [404]}, bypass: true}]`, "rules[0].bypass", "matches on status"},
		{`[{name: a, match: {status: [404]}, key: {sort_params: true}}]`, "rules[0].key", "matches on status"},
		{`[{name: a, match: {methods: GET}}]`, "rules[0].match.methods", "YAML list"},
		{`[{name: a, match: {pth: /a}}]`, "rules[0].match.pth", `did you mean "path"`},
		{`[{name: a, ttl: 1h, default_ttl: 1h}]`, "rules[0].default_ttl", "exclude"},
		{`[{name: a, ttl: forever}]`, "rules[0].ttl", "not a duration"},
		{`[{name: a, ttl: -5s}]`, "rules[0].ttl", "between 0"},
		{`[{name: a, min_ttl: 1h, max_ttl: 1m}]`, "rules[0].min_ttl", "above max_ttl"},
		{`[{name: a, bypass: true, ttl: 1m}]`, "rules[0].bypass", "exclude"},
		{`[{name: a, bypass: yes please}]`, "rules[0].bypass", "true or false"},
		{`[{name: a, key: {ignore_params: ["a=b"]}}]`, "rules[0].key.ignore_params[0]", "not a name"},
		{`[{name: a, key: {headers: ["bad header"]}}]`, "rules[0].key.headers[0]", "header field name"},
		{`[{name: a, key: {allow_params: []}}]`, "rules[0].key.allow_params", "is empty"},
		{`[{name: a, key: {colour: true}}]`, "rules[0].key.colour", "not a key of key"},
		{`[{name: a, response_headers: {remove: [Cache-Control]}}]`, "rules[0].response_headers.remove[0]", "may not be edited"},
		{`[{name: a, response_headers: {set: {Set-Cookie: x=1}}}]`, "rules[0].response_headers.set.Set-Cookie", "may not be edited"},
		{`[{name: a, request_headers: {set: {Host: evil}}}]`, "rules[0].request_headers.set.Host", "may not be edited"},
		{`[{name: a, response_headers: {set: {X-A: "a\nb"}}}]`, "rules[0].response_headers.set.X-A", "valid field value"},
		{`[{name: a, client_no_cache: sometimes}]`, "rules[0].client_no_cache", "honour, coalesce or ignore"},
		{`[{name: a, revalidate_interval: 5s}]`, "rules[0].revalidate_interval", "coalesce"},
		{`[{name: a, match: {cookie: "a=b"}}]`, "rules[0].match.cookie", "cookie name"},
		{`[{name: a, browser_ttl: soon}]`, "rules[0].browser_ttl", "not a duration"},
		{`[{name: a, browser_ttl: -1s}]`, "rules[0].browser_ttl", "between 0"},
		{`[{name: a, browser_ttl: 400d}]`, "rules[0].browser_ttl", "between 0"},
		{`[{name: a, bypass: true, browser_ttl: 1m}]`, "rules[0].browser_ttl", "exclude"},
		{`[{name: a, browser-ttl: 1m}]`, "rules[0].browser-ttl", `did you mean "browser_ttl"`},
	} {
		_, err := parseYAML(t, tc.src)
		var e *Error
		if err == nil || !asError(err, &e) || e.Key != tc.key || !strings.Contains(err.Error(), tc.reason) {
			t.Errorf("%s: got %v, want key %s and %q", tc.src, err, tc.key, tc.reason)
		}
	}
}

func asError(err error, e **Error) bool {
	x, ok := err.(*Error)
	*e = x
	return ok
}

func TestTooManyRulesRefused(t *testing.T) {
	var b strings.Builder
	b.WriteString("[")
	for i := range MaxRules + 1 {
		fmt.Fprintf(&b, "{name: r%d},", i)
	}
	b.WriteString("]")
	if _, err := parseYAML(t, b.String()); err == nil || !strings.Contains(err.Error(), "at most") {
		t.Fatalf("got %v", err)
	}
}

func TestFirstMatchingRuleDecides(t *testing.T) {
	s := mustParse(t, `
- {name: notfound, match: {status: [404]}, ttl: 30s}
- {name: admin, match: {path: /wp-admin/}, bypass: true}
- {name: logged-in, match: {cookie: wordpress_logged_in_*}, bypass: true}
- {name: css, match: {path: "*.css"}, ttl: 1d}
- {name: api, match: {path_regex: "^/api/v[0-9]+/", methods: [GET]}, default_ttl: 10s}
- {name: rest, default_ttl: 5m}
`)
	for _, tc := range []struct {
		method, path, cookie string
		want                 string
	}{
		{"GET", "/wp-admin/edit.php", "", "admin"},
		{"GET", "/%77p-admin/edit.php", "", "admin"}, // an escaped spelling is the same path
		{"GET", "/blog/", "wordpress_logged_in_abc=1", "logged-in"},
		{"GET", "/a/b/site.css", "", "css"},
		{"HEAD", "/api/v2/items", "", "api"},
		{"POST", "/api/v2/items", "", "rest"},
		{"GET", "/api/vX/items", "", "rest"},
		{"GET", "/", "other=1", "rest"},
	} {
		h := http.Header{}
		if tc.cookie != "" {
			h.Set("Cookie", tc.cookie)
		}
		r := s.ForRequest(tc.method, tc.path, h)
		if r == nil || r.Name != tc.want {
			t.Errorf("%s %s: got %v, want %s", tc.method, tc.path, r, tc.want)
		}
	}
	if r := s.ForResponse("GET", "/x.css", nil, 404); r == nil || r.Name != "notfound" {
		t.Errorf("404: got %v", r)
	}
	if r := s.ForResponse("GET", "/x.css", nil, 200); r == nil || r.Name != "css" {
		t.Errorf("200: got %v", r)
	}
	if !s.NeedsHeader() {
		t.Error("a rule matches on a cookie: NeedsHeader must say so")
	}
}

func TestLifetimeApply(t *testing.T) {
	s := mustParse(t, `
- {name: e404, match: {status: [404]}, ttl: 30s}
- {name: def, default_ttl: 1h, min_ttl: 1m, max_ttl: 2h}
- {name: over, ttl: 10m}
`)
	def := s.Rules[1].Lifetime
	for _, tc := range []struct {
		status       int
		origin       time.Duration
		explicit     bool
		want         time.Duration
		wantOperator bool
	}{
		{200, 0, false, time.Hour, true},                 // no freshness from the origin: the default
		{200, 10 * time.Second, true, time.Minute, true}, // explicit but below the floor: lengthened by the operator
		{200, 5 * time.Hour, true, 2 * time.Hour, false}, // explicit, above the ceiling
		{200, 30 * time.Minute, true, 30 * time.Minute, false},
		{404, 0, false, 0, true}, // a rule without status leaves a 404 alone
		{302, 0, false, 0, true},
	} {
		got, op := def.Apply(tc.status, tc.origin, tc.explicit)
		if got != tc.want || op != tc.wantOperator {
			t.Errorf("%d %v explicit=%v: got %v %v, want %v %v", tc.status, tc.origin, tc.explicit, got, op, tc.want, tc.wantOperator)
		}
	}
	if got, _ := s.Rules[2].Lifetime.Apply(200, 0, true); got != 10*time.Minute {
		t.Errorf("ttl must replace an explicit max-age=0: got %v", got)
	}
	e404 := s.Rules[0].Lifetime
	if got, _ := e404.Apply(404, 0, false); got != 30*time.Second || !e404.Gives(404) || e404.Gives(200) {
		t.Errorf("status rule: got %v", got)
	}
}

func TestKeyQuery(t *testing.T) {
	s := mustParse(t, `
- {name: a, match: {path: /a}, key: {ignore_params: [utm_*, fbclid], sort_params: true}}
- {name: b, match: {path: /b}, key: {allow_params: [id, page]}}
- {name: all, match: {path: /c}, key: {ignore_params: ["*"]}}
`)
	a, b, all := s.Rules[0], s.Rules[1], s.Rules[2]
	for _, tc := range []struct {
		r       *Rule
		in, out string
	}{
		{a, "utm_source=x&b=2&a=1&fbclid=z", "a=1&b=2"},
		{a, "utm%5Fsource=x&a=1", "a=1"}, // an escaped name is the same name
		{a, "", ""},
		{a, "&&a=1&", "a=1"},
		{all, "a=1&b=2", ""},
		{b, "page=2&id=7&session=abc", "page=2&id=7"},
		{nil, "z=1&a=2", "z=1&a=2"},
	} {
		if got := tc.r.KeyQuery(tc.in); got != tc.out {
			t.Errorf("%q: got %q, want %q", tc.in, got, tc.out)
		}
	}
}

func TestKeyExtraSeparatesWhatItNames(t *testing.T) {
	s := mustParse(t, `[{name: k, key: {headers: [X-Lang], cookies: [lang], device: true}}]`)
	r := s.Rules[0]
	h := func(kv ...string) http.Header {
		out := http.Header{}
		for i := 0; i < len(kv); i += 2 {
			out.Add(kv[i], kv[i+1])
		}
		return out
	}
	base := r.KeyExtra(h("Cookie", "lang=en; sid=1", "X-Lang", "en"))
	same := r.KeyExtra(h("Cookie", "sid=2; lang=en", "X-Lang", "en"))
	if base != same {
		t.Errorf("another cookie must not change the key: %q vs %q", base, same)
	}
	for _, other := range []http.Header{
		h("Cookie", "lang=de; sid=1", "X-Lang", "en"),
		h("Cookie", "lang=en", "X-Lang", "de"),
		h("Cookie", "sid=1", "X-Lang", "en"), // absent differs from any value
		h("Cookie", "lang=en", "X-Lang", "en", "User-Agent", "Mozilla/5.0 (iPhone) Mobile"),
	} {
		if r.KeyExtra(other) == base {
			t.Errorf("%v must have its own key", other)
		}
	}
	if strings.Contains(base, "en") && strings.Contains(base, "sid") {
		t.Errorf("values must be hashed, not written: %q", base)
	}
}

func TestDeviceClass(t *testing.T) {
	for ua, want := range map[string]string{
		"Mozilla/5.0 (iPhone; CPU iPhone OS 17_0 like Mac OS X) Mobile/15E148": "mobile",
		"Mozilla/5.0 (Linux; Android 14; Pixel 8) Mobile Safari/537.36":        "mobile",
		"Mozilla/5.0 (Linux; Android 13; SM-X710) Safari/537.36":               "tablet",
		"Mozilla/5.0 (iPad; CPU OS 17_0 like Mac OS X)":                        "tablet",
		"Mozilla/5.0 (X11; Linux x86_64) Firefox/130.0":                        "desktop",
		"": "desktop",
	} {
		if got := DeviceClass(ua); got != want {
			t.Errorf("%q: got %s, want %s", ua, got, want)
		}
	}
}

func TestGlobMatch(t *testing.T) {
	for _, tc := range []struct {
		glob, path string
		want       bool
	}{
		{"*.css", "/a/b.css", true},
		{"*.css", "/a/b.css.map", false},
		{"/img/*.png", "/img/x/y.png", true},
		{"/img/?.png", "/img/a.png", true},
		{"/img/?.png", "/img/ab.png", false},
		{"/a*b*c", "/aXbYc", true},
		{"/a*b*c", "/aXbY", false},
		{"*", "", true},
		{"/" + strings.Repeat("*a", 20), "/" + strings.Repeat("a", 40) + "b", false}, // no blow-up
	} {
		if got := globMatch(tc.glob, tc.path); got != tc.want {
			t.Errorf("%q %q: got %v", tc.glob, tc.path, got)
		}
	}
}

func TestHeaderEditApply(t *testing.T) {
	s := mustParse(t, `[{name: h, response_headers: {set: {x-frame-options: DENY}, remove: [Server]}}]`)
	h := http.Header{"Server": {"origin/1"}, "X-Frame-Options": {"SAMEORIGIN"}}
	s.Rules[0].Response.ApplyTo(h)
	if h.Get("Server") != "" || h.Get("X-Frame-Options") != "DENY" {
		t.Fatalf("got %v", h)
	}
}

// FuzzParse: no input makes Parse panic, and what it accepts matches
// without panicking.
func FuzzParse(f *testing.F) {
	f.Add(`[{name: a, match: {path: "*.css"}, ttl: 1d}]`)
	f.Add(`[{name: a, match: {path_regex: "^/a", status: [404]}, ttl: 30}]`)
	f.Add(`[{name: a, key: {ignore_params: [utm_*], headers: [X-A], cookies: [c]}, client_no_cache: coalesce, revalidate_interval: 5s}]`)
	f.Add(`[{name: a, request_headers: {set: {a: b}, remove: [c]}, strip_cookies: true}]`)
	f.Fuzz(func(t *testing.T, src string) {
		var v any
		if yaml.Unmarshal([]byte(src), &v) != nil {
			return
		}
		s, err := Parse("rules", v)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "rules") {
				t.Fatalf("error does not name the key: %v", err)
			}
			return
		}
		h := http.Header{"Cookie": {"a=1; b=2"}}
		for _, p := range []string{"/", "/a.css", "/%zz", "/a?b"} {
			r := s.ForRequest("GET", p, h)
			_ = r.KeyQuery("a=1&utm_x=2&&")
			_ = r.KeyExtra(h)
			_ = s.ForResponse("GET", p, h, 404)
		}
	})
}

// worst50 is rules/testdata/worst50.yaml's rule list.
func worst50(t testing.TB) *Set {
	t.Helper()
	data, err := os.ReadFile("testdata/worst50.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Rules any `yaml:"rules"`
	}
	if err := yaml.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	s, err := Parse("rules", doc.Rules)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// BenchmarkMatch50: the rule of a request among 50 rules of mixed kinds,
// the last one matching (the worst case).
func BenchmarkMatch50(b *testing.B) {
	s := worst50(b)
	b.ReportAllocs()
	for b.Loop() {
		if r := s.ForRequest("GET", "/some/page/path/index.html", nil); r == nil || r.Name != "last" {
			b.Fatal(r)
		}
	}
}

// A rule after one that matches every request is never used, and said so;
// a rule that only looks broad (a method, a status, a cookie, a narrower
// path) leaves the rules after it reachable.
func TestWarningsNameRulesACatchAllHides(t *testing.T) {
	for _, tc := range []struct {
		src  string
		want []string
	}{
		{`[{name: all, ttl: 1m}, {name: img, match: {path: /img/}, ttl: 1h}]`, []string{`rules[1] ("img") is never used: rules[0] ("all")`}},
		{`[{name: root, match: {path: /}, ttl: 1m}, {name: a, ttl: 1h}, {name: b, bypass: true}]`, []string{`rules[1] ("a") is never used: rules[0] ("root")`, `rules[2] ("b") is never used: rules[0] ("root")`}},
		{`[{name: star, match: {path: "*"}, ttl: 1m}, {name: a, ttl: 1h}]`, []string{`rules[1] ("a") is never used`}},
		{`[{name: slashstar, match: {path: "/*"}, ttl: 1m}, {name: a, ttl: 1h}]`, []string{`rules[1] ("a") is never used`}},
		{`[{name: img, match: {path: /img/}, ttl: 1h}, {name: all, ttl: 1m}]`, nil},
		{`[{name: gets, match: {methods: [GET]}, ttl: 1m}, {name: a, ttl: 1h}]`, nil},
		{`[{name: e404, match: {status: [404]}, ttl: 1m}, {name: a, ttl: 1h}]`, nil},
		{`[{name: sess, match: {cookie: sid}, bypass: true}, {name: a, ttl: 1h}]`, nil},
		{`[{name: re, match: {path_regex: ".*"}, ttl: 1m}, {name: a, ttl: 1h}]`, nil}, // not read as a catch-all: no warning rather than a wrong one
		{`[{name: all, ttl: 1m}]`, nil},
	} {
		got := mustParse(t, tc.src).Warnings()
		if len(got) != len(tc.want) {
			t.Errorf("%s: %q, want %d warnings", tc.src, got, len(tc.want))
			continue
		}
		for i, w := range tc.want {
			if !strings.Contains(got[i], w) {
				t.Errorf("%s: warning %q, want it to hold %q", tc.src, got[i], w)
			}
		}
	}
	var none *Set
	if none.Warnings() != nil {
		t.Error("no rules: warnings")
	}
}

// TestBrowserTTLIsForTheRulesStatuses: browser_ttl applies where the
// rule's lifetimes would (its statuses, else the successful ones), a
// status rule may set it (it acts on the answer), and a set without one
// says so to the hit path.
func TestBrowserTTLIsForTheRulesStatuses(t *testing.T) {
	s := mustParse(t, `
- {name: errors, match: {status: [404]}, browser_ttl: 30s}
- {name: pages, match: {path: /p/}, browser_ttl: 10m}
- {name: zero, match: {path: /z/}, browser_ttl: 0s}
- {name: other, default_ttl: 1h}
`)
	for _, tc := range []struct {
		path   string
		status int
		want   time.Duration
		set    bool
	}{
		{"/p/a", 200, 10 * time.Minute, true},
		{"/p/a", 301, 10 * time.Minute, true},
		{"/p/a", 500, 0, false}, // not a status the lifetimes apply to
		{"/x", 404, 30 * time.Second, true},
		{"/z/a", 200, 0, true},
		{"/x", 200, 0, false},
	} {
		got, set := s.ForResponse(http.MethodGet, tc.path, nil, tc.status).BrowserTTLFor(tc.status)
		if got != tc.want || set != tc.set {
			t.Errorf("%s %d: browser ttl %v %v, want %v %v", tc.path, tc.status, got, set, tc.want, tc.set)
		}
		if may := s.BrowserTTLMayApply(http.MethodGet, tc.path, tc.status); may != tc.set {
			t.Errorf("%s %d: BrowserTTLMayApply %v, want %v", tc.path, tc.status, may, tc.set)
		}
	}
	if mustParse(t, `[{name: a, default_ttl: 1h}]`).BrowserTTLs() {
		t.Error("a set without browser_ttl reports one")
	}
	// A cookie condition: the hit path, which reads no cookie, must step
	// aside for every answer.
	c := mustParse(t, `[{name: members, match: {cookie: member, status: [200]}, browser_ttl: 1h}]`)
	if !c.BrowserTTLMayApply(http.MethodGet, "/anything", 200) {
		t.Error("a browser_ttl under a cookie condition: the hit path may answer without looking at the cookie")
	}
	if !strings.Contains(strings.Join(s.Rules[1].Explain(), "\n"), "browser_ttl 10m0s") {
		t.Errorf("Explain: %q", s.Rules[1].Explain())
	}
}

// TestHeadOnlyRuleWithResponseFieldsIsWarnedOf: a HEAD's answer is
// stored and sent under the GET's rule, so a rule for HEAD alone that
// sets response fields does nothing with them: config check says so.
func TestHeadOnlyRuleWithResponseFieldsIsWarnedOf(t *testing.T) {
	for _, tc := range []struct {
		src  string
		warn bool
	}{
		{`[{name: probes, match: {methods: [HEAD]}, ttl: 1d}]`, true},
		{`[{name: probes, match: {methods: [HEAD]}, response_headers: {set: {X-A: b}}}]`, true},
		{`[{name: probes, match: {methods: [HEAD]}, browser_ttl: 1m}]`, true},
		{`[{name: probes, match: {methods: [HEAD]}, request_headers: {set: {X-A: b}}}]`, false},
		{`[{name: pages, match: {methods: [GET]}, ttl: 1d}]`, false},
		{`[{name: both, match: {methods: [GET, HEAD]}, ttl: 1d}]`, false},
		{`[{name: any, ttl: 1d}]`, false},
	} {
		ws := mustParse(t, tc.src).Warnings()
		got := len(ws) == 1 && strings.Contains(ws[0], "matches HEAD but not GET")
		if got != tc.warn || !tc.warn && len(ws) > 0 {
			t.Errorf("%s: warnings %q, want a HEAD warning: %v", tc.src, ws, tc.warn)
		}
	}
}
