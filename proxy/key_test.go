package proxy

import (
	"crypto/tls"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
)

func TestCacheKey(t *testing.T) {
	cases := []struct{ scheme, host, path, query, want string }{
		{"http", "Example.COM", "/a", "", "http://example.com/a"},
		{"http", "example.com", "", "", "http://example.com/"},
		{"http", "example.com", "/a", "b=2&a=1", "http://example.com/a?b=2&a=1"}, // order kept: the origin sees it
		{"https", "example.com:8443", "/a%2Fb", "x=%20", "https://example.com/a%2Fb?x=%20"},
		{"http", "[::1]:8080", "/", "", "http://[::1]/"},
		{"http", "[::1]", "/", "", "http://[::1]/"},
		{"http", "h", "/", "a=1&a=0", "http://h/?a=1&a=0"},
	}
	for _, tc := range cases {
		if got := CacheKey(tc.scheme, tc.host, tc.path, tc.query); got != tc.want {
			t.Errorf("CacheKey(%q,%q,%q,%q) = %q, want %q", tc.scheme, tc.host, tc.path, tc.query, got, tc.want)
		}
	}
}

func TestVaryKeyNormalisation(t *testing.T) {
	names, star := VaryNames(http.Header{"Vary": {"Accept-Encoding, accept-language", "ACCEPT-ENCODING"}})
	if star || strings.Join(names, ",") != "accept-encoding,accept-language" {
		t.Fatalf("VaryNames = %v, %v", names, star)
	}
	a := VaryKey(names, http.Header{"Accept-Encoding": {"gzip, br"}, "Accept-Language": {"en"}})
	b := VaryKey(names, http.Header{"Accept-Encoding": {"gzip,br"}, "Accept-Language": {"en"}})
	c := VaryKey(names, http.Header{"Accept-Encoding": {"gzip", "br"}, "Accept-Language": {"en"}})
	if a != b || a != c {
		t.Errorf("equivalent field values select different variants: %q %q %q", a, b, c)
	}
	absent := VaryKey(names, http.Header{"Accept-Language": {"en"}})
	empty := VaryKey(names, http.Header{"Accept-Encoding": {""}, "Accept-Language": {"en"}})
	if absent == empty {
		t.Error("an absent field and an empty one select the same variant")
	}
	if _, star := VaryNames(http.Header{"Vary": {"Accept, *"}}); !star {
		t.Error("Vary: * not detected")
	}
}

// TestVaryKeyReadsOnlyListsAsLists: a field that is no list selects its
// variant by its value as sent; only the Accept family is normalised.
func TestVaryKeyReadsOnlyListsAsLists(t *testing.T) {
	differ := []struct {
		name string
		a, b []string
	}{
		{"origin", []string{"https://app.example"}, []string{"https://app.example,"}},
		{"origin", []string{"https://app.example"}, []string{"https://app.example, "}},
		{"origin", []string{"https://a.example,https://b.example"}, []string{"https://a.example, https://b.example"}},
		{"cookie", []string{"a=1;b=2"}, []string{"a=1; b=2"}},
		{"cookie", []string{"a=1, b=2"}, []string{"a=1,b=2"}},
		{"cookie", []string{"a=1", "b=2"}, []string{"a=1,b=2"}},
		{"user-agent", []string{"x, y"}, []string{"x,y"}},
		{"x-tenant", []string{"t1"}, []string{"t1,"}},
		{"x-tenant", []string{""}, []string{","}},
		{"accept", []string{`text/x;p="a, b"`}, []string{`text/x;p="a,b"`}},
	}
	for _, tc := range differ {
		a := VaryKey([]string{tc.name}, http.Header{http.CanonicalHeaderKey(tc.name): tc.a})
		b := VaryKey([]string{tc.name}, http.Header{http.CanonicalHeaderKey(tc.name): tc.b})
		if a == b {
			t.Errorf("%s: %q and %q select one variant (%q)", tc.name, tc.a, tc.b, a)
		}
	}
	same := []struct {
		name string
		a, b []string
	}{
		{"accept-language", []string{"en, fr"}, []string{"en,fr"}},
		{"accept-language", []string{"en,,fr,"}, []string{"en", "fr"}},
		{"accept", []string{`text/x;p="a, b", text/y`}, []string{`text/x;p="a, b",text/y`}},
		{"accept", []string{`text/x;p="a\", b"`}, []string{` text/x;p="a\", b" `}},
		{"origin", []string{" https://app.example\t"}, []string{"https://app.example"}},
	}
	for _, tc := range same {
		a := VaryKey([]string{tc.name}, http.Header{http.CanonicalHeaderKey(tc.name): tc.a})
		b := VaryKey([]string{tc.name}, http.Header{http.CanonicalHeaderKey(tc.name): tc.b})
		if a != b {
			t.Errorf("%s: %q and %q select different variants (%q, %q)", tc.name, tc.a, tc.b, a, b)
		}
	}
	var got []string
	for e := range listElements(`a, "b,c" ,, d;q="x\"," ,`) {
		got = append(got, e)
	}
	if want := []string{"a", `"b,c"`, `d;q="x\","`}; !slices.Equal(got, want) {
		t.Errorf("listElements = %q, want %q", got, want)
	}
}

// FuzzCacheKeyAndVary checks that key building never panics, that equal
// inputs give equal keys, and that distinct Vary selections stay distinct.
func FuzzCacheKeyAndVary(f *testing.F) {
	f.Add("example.com", "/a", "b=1&a=2", "Accept-Encoding", "gzip, br", "gzip")
	f.Add("", "", "&&", ",,", "", "\x00")
	f.Fuzz(func(t *testing.T, host, path, query, vary, v1, v2 string) {
		k1 := CacheKey("http", host, path, query)
		if query != "" && !strings.HasSuffix(k1, "?"+query) {
			t.Fatalf("the key %q does not keep the query %q as forwarded", k1, query)
		}
		if k1 != CacheKey("http", strings.ToUpper(host), path, query) && strings.EqualFold(strings.ToUpper(host), host) && isASCII(host) {
			t.Fatalf("host case changed the key: %q", k1)
		}
		names, _ := VaryNames(http.Header{"Vary": {vary}})
		if len(names) != 1 || !validFieldName(names[0]) {
			return
		}
		field := http.CanonicalHeaderKey(names[0])
		a := VaryKey(names, http.Header{field: {v1}})
		b := VaryKey(names, http.Header{field: {v2}})
		// Two values select the same variant exactly when they are equal:
		// as lists for a list field (commas outside quoted strings and the
		// blanks around them do not count), as sent, trimmed, otherwise.
		norm := func(v string) string { return strings.Trim(v, " \t") }
		if listFields[names[0]] {
			norm = normalList
		}
		if same := norm(v1) == norm(v2); same != (a == b) {
			t.Fatalf("Vary %q: values %q and %q give keys %q and %q", vary, v1, v2, a, b)
		}
		if absent := VaryKey(names, http.Header{}); absent == a {
			t.Fatalf("an absent field selects the variant of %q", v1)
		}
	})
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return false
		}
	}
	return true
}

func validFieldName(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != '-' && (c < '0' || c > '9') && (c < 'a' || c > 'z') {
			return false
		}
	}
	return s != ""
}

// normalList is a list field's value with its elements (split at commas
// outside quoted strings) trimmed and empty ones dropped, one per line: a
// second reading of the grammar, written apart from listElements.
func normalList(v string) string {
	var parts []string
	var cur strings.Builder
	quoted, escaped := false, false
	end := func() {
		if p := strings.Trim(cur.String(), " \t"); p != "" {
			parts = append(parts, p)
		}
		cur.Reset()
	}
	for _, c := range []byte(v) {
		switch {
		case escaped:
			escaped = false
		case quoted && c == '\\':
			escaped = true
		case c == '"':
			quoted = !quoted
		case c == ',' && !quoted:
			end()
			continue
		}
		cur.WriteByte(c)
	}
	end()
	return strings.Join(parts, "\n")
}

// TestKeySchemeSharedByDefault: a response filled over http answers https
// (CDNs' default), unless cache.key_scheme keeps the scheme in the key;
// purge by URL follows the same rule.
func TestKeySchemeSharedByDefault(t *testing.T) {
	for _, keep := range []bool{false, true} {
		p := newTestProxy(t, func(c *Config) { c.KeyScheme = keep })
		p.origin.set(originResp{header: map[string]string{"Cache-Control": "max-age=60"}, body: "x"})
		p.do("GET", "/s", nil)
		req := httptest.NewRequest("GET", "https://example.com/s", nil)
		req.TLS = &tls.ConnectionState{}
		w := httptest.NewRecorder()
		p.h.ServeHTTP(w, req)
		p.h.Wait()
		if hit := w.Header().Get("Cache-Status") == "edge; hit"; hit == keep {
			t.Errorf("key_scheme %v: https request served from the http entry: %v", keep, hit)
		}
		n, _ := p.h.Purge(PurgeRequest{URL: "https://example.com/s"})
		if n != 1 { // the shared entry, or the https one alone
			t.Errorf("key_scheme %v: purge of the https URL removed %d", keep, n)
		}
	}
}
