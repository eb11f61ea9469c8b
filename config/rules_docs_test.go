package config

import (
	"errors"
	"os"
	"regexp"
	"strings"
	"testing"
)

// TestRulesDocExamplesLoad loads every YAML example of docs/rules.md that
// configures sites, so that the worked examples stay valid.
func TestRulesDocExamplesLoad(t *testing.T) {
	doc, err := os.ReadFile("../docs/rules.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := regexp.MustCompile("(?s)```yaml\n(.*?)```").FindAllStringSubmatch(string(doc), -1)
	n := 0
	for _, b := range blocks {
		if !strings.Contains(b[1], "sites:") {
			continue
		}
		n++
		cfg, err := LoadBytes([]byte(b[1]))
		if err != nil {
			t.Errorf("example %d does not load: %v\n%s", n, err, b[1])
			continue
		}
		for _, s := range cfg.Sites {
			if s.Rules == nil || len(s.Rules.Rules) == 0 {
				t.Errorf("example %d: site %s has no rules", n, s.Name)
			}
		}
	}
	if n < 4 {
		t.Fatalf("found %d examples with sites, want the 4 worked examples", n)
	}
}

func TestRuleAndRateLimitErrorsNameTheKey(t *testing.T) {
	site := "sites:\n  - name: s\n    hosts: [a.test]\n    origins: [\"http://127.0.0.1:1\"]\n"
	for _, tc := range []struct{ yaml, key, reason string }{
		{site + "    rules:\n      - {name: a}\n      - {name: b, ttl: soon}\n", "sites[0].rules[1].ttl", "not a duration"},
		{site + "    rules: [{name: a, response_headers: {remove: [Cache-Control]}}]\n", "sites[0].rules[0].response_headers.remove[0]", "may not be edited"},
		{site + "    rate_limit: {rate: -1}\n", "sites[0].rate_limit.rate", "requests per second"},
		{site + "    rate_limit: {rate: 5, key: cookie}\n", "sites[0].rate_limit.key", "address or header:NAME"},
		{site + "    rate_limit: {rate: 5, burts: 3}\n", "sites[0].rate_limit.burts", "rate, burst or key"},
		{site + "rules: [{name: a}]\n", "rules", "sites[i].rules"},
		{"origin:\n  url: http://127.0.0.1:1\nrules: [{name: a, match: {status: [404]}, bypass: true}]\n", "rules[0].bypass", "matches on status"},
		{"origin:\n  url: http://127.0.0.1:1\ncache:\n  client_no_cache: sometimes\n", "cache.client_no_cache", "honour, coalesce or ignore"},
		{"origin:\n  url: http://127.0.0.1:1\nlimits:\n  rate_key: ip\n", "limits.rate_key", "address or header:NAME"},
	} {
		_, err := LoadBytes([]byte(tc.yaml))
		var ce *Error
		if err == nil || !errors.As(err, &ce) || ce.Key != tc.key || !strings.Contains(err.Error(), tc.reason) {
			t.Errorf("%q: got %v, want key %s and %q", tc.yaml, err, tc.key, tc.reason)
		}
	}
}

func TestSiteRateLimitInheritsLimitsRate(t *testing.T) {
	cfg, err := LoadBytes([]byte("limits:\n  rate: 7\n  rate_burst: 9\nsites:\n  - {name: a, hosts: [a.test], origins: [\"http://127.0.0.1:1\"]}\n  - {name: b, hosts: [b.test], origins: [\"http://127.0.0.1:1\"], rate_limit: {burst: 3}}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if a := cfg.Sites[0].RateLimit; a.Rate != 7 || a.Burst != 9 || a.Key != "address" {
		t.Errorf("site a: %+v", a)
	}
	if b := cfg.Sites[1].RateLimit; b.Rate != 7 || b.Burst != 3 {
		t.Errorf("site b: %+v", b)
	}
}

func TestEveryErrorInOnePassWithItsSource(t *testing.T) {
	t.Setenv("EDGE_CACHE_MAX_BYTES", "lots")
	dir := t.TempDir()
	file := dir + "/edge.yaml"
	if err := os.WriteFile(file, []byte("origin:\n  url: http://127.0.0.1:1\nlisten: nowhere\nlimits:\n  max_url_bytes: -1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	v, err := NewViper(file)
	if err != nil {
		t.Fatal(err)
	}
	_, err = Load(v)
	if err == nil {
		t.Fatal("loaded")
	}
	msg := err.Error()
	for _, want := range []string{"3 errors", "listen", "(from " + file + ")", "cache.max_bytes", "(from EDGE_CACHE_MAX_BYTES)", "limits.max_url_bytes"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error lacks %q:\n%s", want, msg)
		}
	}
	var ce *Error
	if !errors.As(err, &ce) || ce.Key == "" {
		t.Errorf("errors.As finds no *Error in %v", err)
	}
}

func TestUnknownKeysAndVariablesGetSuggestions(t *testing.T) {
	_, err := LoadBytes([]byte("origin:\n  url: http://127.0.0.1:1\ncache:\n  max_byte: 1GiB\n  stale_if_eror: 1m\n"))
	if err == nil || !strings.Contains(err.Error(), `cache.max_byte: is not a known key (see docs/operations.md) (did you mean "cache.max_bytes"?)`) ||
		!strings.Contains(err.Error(), "cache.stale_if_eror") {
		t.Errorf("unknown keys: %v", err)
	}
	t.Setenv("EDGE_CACHE_MAXBYTES", "1GiB")
	t.Setenv("EDGE_SOMETHING_ELSE_ENTIRELY", "1")
	w := UnknownEnv()
	if len(w) != 1 || !strings.Contains(w[0], "EDGE_CACHE_MAXBYTES") || !strings.Contains(w[0], "EDGE_CACHE_MAX_BYTES") {
		t.Errorf("UnknownEnv: %v", w)
	}
}

func TestSitesAndRulesFromTheEnvironment(t *testing.T) {
	for _, k := range Keys() {
		os.Unsetenv(k.Env())
	}
	t.Setenv("EDGE_SITES", `[{name: shop, hosts: [shop.test], origins: ["http://127.0.0.1:1"], rules: [{name: a, default_ttl: 5m}]}]`)
	v, err := NewViper("")
	if err != nil {
		t.Fatal(err)
	}
	c, err := Load(v)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Sites) != 1 || c.Sites[0].Name != "shop" || c.Sites[0].Rules == nil {
		t.Fatalf("EDGE_SITES: %+v", c.Sites)
	}
	os.Unsetenv("EDGE_SITES")
	t.Setenv("EDGE_ORIGIN_URL", "http://127.0.0.1:1")
	t.Setenv("EDGE_RULES", `[{name: pages, default_ttl: 5m}]`)
	if c, err = Load(v); err != nil || c.Sites[0].Rules == nil || c.Sites[0].Rules.Rules[0].Name != "pages" {
		t.Fatalf("EDGE_RULES: %v %+v", err, c)
	}
	t.Setenv("EDGE_SITES", `[{name: shop`)
	if _, err = Load(v); err == nil || !strings.Contains(err.Error(), "(from EDGE_SITES)") {
		t.Fatalf("a broken EDGE_SITES must name the variable: %v", err)
	}
}

func TestYAMLSyntaxErrorShowsTheLines(t *testing.T) {
	_, err := LoadBytes([]byte("origin:\n  url: http://127.0.0.1:1\ncache:\n  max_bytes: 1GiB\n  sort_query: [unclosed\nlimits:\n  rate: 1\n"))
	if err == nil || !strings.Contains(err.Error(), "5 |   sort_query: [unclosed") {
		t.Fatalf("a syntax error must show the faulty line: %v", err)
	}
}

func TestErrorsHideSecretsAndNameTheRightSource(t *testing.T) {
	_, err := LoadBytes([]byte("origin:\n  url: http://127.0.0.1:1\nadmin:\n  token: @dm1n-T0ken!\n"))
	if err == nil || strings.Contains(err.Error(), "dm1n") || !strings.Contains(err.Error(), "token: <hidden>") {
		t.Errorf("a YAML error shows a secret: %v", err)
	}
	for _, k := range Keys() {
		os.Unsetenv(k.Env())
	}
	t.Setenv("EDGE_LISTEN", "")
	dir := t.TempDir()
	if err := os.WriteFile(dir+"/e.yaml", []byte("origin:\n  url: http://127.0.0.1:1\nlisten: nowhere\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	v, _ := NewViper(dir + "/e.yaml")
	if _, err := Load(v); err == nil || !strings.Contains(err.Error(), "(from "+dir+"/e.yaml)") {
		t.Errorf("an empty variable must not be named as the source: %v", err)
	}
	t.Setenv("EDGE_ORIGIN_PORT", "tcp://10.0.0.1:80")
	t.Setenv("EDGE_CLUSTER_SERVICE_HOST", "10.0.0.2")
	if w := UnknownEnv(); len(w) != 0 {
		t.Errorf("Kubernetes service-link variables were warned about: %v", w)
	}
}

func TestEverySiteErrorInOnePass(t *testing.T) {
	_, err := LoadBytes([]byte(`sites:
  - {name: a, hosts: [a.test], origins: ["ftp://x"]}
  - {name: b, hosts: [b.test], origins: ["http://127.0.0.1:1"], rules: [{name: r, tll: 1m}]}
  - {name: c, hosts: [c.test], origins: ["http://127.0.0.1:1"], rate_limit: {rate: -1}}
`))
	for _, want := range []string{"3 errors", "sites[0].origins[0]", "sites[1].rules[0].tll", "sites[2].rate_limit.rate"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q: %v", want, err)
		}
	}
}

func TestEveryRuleErrorInOnePass(t *testing.T) {
	_, err := LoadBytes([]byte("origin:\n  url: http://127.0.0.1:1\nrules:\n  - {name: a, tll: 1m}\n  - {name: b}\n  - {name: c, ttl: soon}\n"))
	for _, want := range []string{"2 errors", "rules[0].tll", "rules[2].ttl"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q: %v", want, err)
		}
	}
}
