package rules

import (
	"net/http"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

func parseSrc(t *testing.T, src string) (*Set, error) {
	t.Helper()
	var v any
	if err := yaml.Unmarshal([]byte(src), &v); err != nil {
		t.Fatal(err)
	}
	return Parse("rules", v)
}

// TestKeyCookiePatternIsKeyedOrRefused: key.cookies is checked with the
// same words as ignore_params ("a trailing * makes a prefix; * alone is
// every name") and Explain prints the pattern as a cookie the key adds,
// but KeyExtra compares names exactly: two sessions of SSESS<hash> get
// one key. Either the pattern keys on the cookies it names, or Parse
// refuses it, naming the key.
func TestKeyCookiePatternIsKeyedOrRefused(t *testing.T) {
	for _, src := range []string{
		`[{name: pages, key: {cookies: ["SSESS*"]}}]`,
		`[{name: pages, key: {cookies: ["*"]}}]`,
	} {
		s, err := parseSrc(t, src)
		if err != nil {
			continue // refused: the operator is told
		}
		r := s.ForKey("/dashboard", "")
		a := r.KeyExtra(http.Header{"Cookie": {"SSESS9f3a=alice"}})
		b := r.KeyExtra(http.Header{"Cookie": {"SSESS9f3a=bob"}})
		if a == b {
			t.Errorf("%s: accepted, and the sessions alice and bob share the key extra %q", src, a)
		}
	}
}

// TestStripCookiesWithKeyCookiesIsRefused: a rule that strips cookies
// and keys on one can never key on it (the Cookie is gone before the key
// is made): it parses, and means "one entry for everyone", not what it
// says. Config check must name the key and stop.
func TestStripCookiesWithKeyCookiesIsRefused(t *testing.T) {
	if _, err := parseSrc(t, `[{name: pages, strip_cookies: true, default_ttl: 1h, key: {cookies: [lang]}}]`); err == nil {
		t.Error("a rule with strip_cookies and key.cookies was accepted: its key never sees the cookie")
	}
}

// TestPathWithAQueryIsRefused: rules match the path alone, so a path
// pattern that spells a query (OpenCart's pages are all
// /index.php?route=…) can never match what its author meant: "?" is read
// as a one-byte glob. The bypass below parses and never applies; config
// check must name the key and say why.
func TestPathWithAQueryIsRefused(t *testing.T) {
	s, err := parseSrc(t, `[{name: account, match: {path: "/index.php?route=account/*"}, bypass: true}, {name: pages, default_ttl: 5m}]`)
	if err != nil {
		return
	}
	if r := s.ForRequest("GET", "/index.php", nil); r == nil || r.Name != "account" {
		t.Errorf("a path pattern with a query was accepted, and GET /index.php?route=account/login falls to rule %q: the bypass never applies", r.Name)
	}
}

// TestRequestEditOfWhatSelectsTheClientsAnswerIsRefused: request edits
// change the request the edge answers the client by, so an edit meant for
// the origin (nginx's proxy_set_header Accept-Encoding gzip) sent gzip to
// a client that accepts no coding (a review's test, on the handler). Such
// edits are refused at load, naming the key.
func TestRequestEditOfWhatSelectsTheClientsAnswerIsRefused(t *testing.T) {
	for _, f := range []string{"Accept-Encoding", "accept-encoding", "Range", "If-None-Match", "If-Modified-Since", "Cache-Control", "Pragma"} {
		for _, edit := range []string{`{set: {` + f + `: gzip}}`, `{remove: [` + f + `]}`} {
			_, err := parseSrc(t, `[{name: pages, request_headers: `+edit+`}]`)
			if err == nil || !strings.Contains(err.Error(), "rules[0].request_headers.") || !strings.Contains(err.Error(), "answers the client by it") {
				t.Errorf("%s: %v", edit, err)
			}
		}
	}
}

// TestAmbiguousPathsArePassed: every spelling an origin may read as
// another path gets the set's bypass, whatever rule its letters match;
// plain paths keep their rules.
func TestAmbiguousPathsArePassed(t *testing.T) {
	s, err := parseSrc(t, `[{name: static, match: {path: /static/}, ttl: 1h}, {name: pages, default_ttl: 5m}]`)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"//api/me", "/./api/me", "/x/../api/me", "/%2e/api/me", "/static/%2e%2e/api/me", "/static/..",
		"/static/.", "/static/x%2F%2Fy", "/static\\..\\api", "/static/%5c../api", "/static;x/a.css", "/static/a.css%3bjsessionid=1"} {
		for _, r := range []*Rule{s.ForRequest("GET", p, nil), s.ForKey(p, ""), s.ForRequest("HEAD", p, nil)} {
			if r == nil || r.Name != AmbiguousPathRule || !r.Bypass || r.KeyedOnRequest() {
				t.Errorf("%s: got rule %v, want the bypass %s", p, r, AmbiguousPathRule)
			}
		}
		if r := s.ForResponse("GET", p, nil, 200); r == nil || r.Lifetime.Sets() {
			t.Errorf("%s: the response rule %v gives a lifetime", p, r)
		}
	}
	for _, p := range []string{"/static/a.css", "/static/.well-known/x", "/a..b/c", "/static/...", "/"} {
		if r := s.ForRequest("GET", p, nil); r == nil || r.Name == AmbiguousPathRule {
			t.Errorf("%s: a plain path got %v", p, r)
		}
	}
}
