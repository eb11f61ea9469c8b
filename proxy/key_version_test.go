package proxy

import (
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"
)

// cacheKeyFingerprint is a hash of what CacheKey, VaryKey, the handler's
// URL and variant keys and the rules' key shaping make of fixed inputs
// under CacheKeyVersion. A change to how requests map to
// keys changes it: then bump CacheKeyVersion (so that the disk tier drops
// what the old mapping stored) and update both.
//
// Re-pinned without a bump once (2026-12-06, d4d2e23d… → this): URLKey, a
// purge's and the route explorer's key, began to spell the host
// canonically and apply the site's rules, as the front and the handler
// always did for requests. No request's key changed, so nothing stored
// under version "2" is keyed otherwise; the fingerprint moved only
// because it reads the mapping through URLKey. Version "3" with a folded
// cookie among the inputs (a review: the folding had changed keys twice
// under "2" with the pin unmoved, no input holding such a name). Version
// "4": the values of Vary fields that are no list keyed by their digest.
const cacheKeyFingerprint = "a86c22a24aff43753bc57d4f1b6dd954"

// keyVersionInputs exercise every rule of the mapping: host case, ports,
// trailing dots, empty paths, queries, and Vary's list and non-list fields
// with commas, quotes, backslashes, empty and absent values.
var keyVersionInputs = []struct {
	scheme, host, path, query string
	vary                      []string
	header                    http.Header
}{
	{"http", "Example.COM:8080", "", "", nil, nil},
	{"https", "example.com.", "/a%2Fb", "b=2&a=1", nil, nil},
	{"http", "[::1]:80", "/x", "", nil, nil},
	{"http", "not a host", "/x", "q", nil, nil},
	{"https", "a.example", "/v", "", []string{"accept-encoding", "origin"},
		http.Header{"Accept-Encoding": {"gzip, br", " zstd "}, "Origin": {"https://app.example,"}}},
	{"https", "a.example", "/v", "", []string{"accept", "cookie", "x-absent"},
		http.Header{"Accept": {`*/*, x;y="a,b\"`, "text/html;q=0.9,,"}, "Cookie": {"a=1, b=2", " c=3\t"}}},
	{"https", "a.example", "/v", "", []string{"accept-language", "user-agent"},
		http.Header{"Accept-Language": {""}, "User-Agent": {"x, y"}}},
}

func TestCacheKeyVersionPinsTheKeys(t *testing.T) {
	sum := sha256.New()
	for _, in := range keyVersionInputs {
		sum.Write([]byte(CacheKey(in.scheme, in.host, in.path, in.query)))
		sum.Write([]byte{0xff})
		sum.Write([]byte(VaryKey(in.vary, in.header)))
		sum.Write([]byte{0xfe})
		sum.Write([]byte(KeyScheme(in.scheme, false)))
		sum.Write([]byte(KeyScheme(in.scheme, true)))
		sum.Write([]byte{0xfd})
	}
	// The handler's part: a named site's prefix and cache.sort_query.
	for _, cfg := range []Config{{}, {SortQuery: true, KeyScheme: true, SiteOf: func(h string) string {
		if h == "shop.example" {
			return "shop"
		}
		return ""
	}}} {
		h := &Handler{cfg: cfg}
		for _, raw := range []string{"https://shop.example/a?b=2&a=1", "http://Other.example:81/?x", "https://shop.example./p"} {
			u, err := url.Parse(raw)
			if err != nil {
				t.Fatal(err)
			}
			sum.Write([]byte(h.URLKey(u)))
			sum.Write([]byte{0xfc})
		}
	}
	// Rules' key shaping: the query a key keeps and the fields it adds.
	set := ruleSite(t, `
- {name: shaped, match: {path: "/s/*"}, key: {ignore_params: [utm_*], sort_params: true, headers: [X-Lang], cookies: [lang, "SS*"], device: true}}
- {name: allowed, match: {path: "/a/*"}, key: {allow_params: [id, page]}}
`).Rules
	for _, path := range []string{"/s/x", "/a/x"} {
		rule := set.ForKey(path, "")
		sum.Write([]byte(rule.KeyQuery("utm_source=a&id=2&b=1&page=3;x")))
		sum.Write([]byte(rule.KeyExtra(http.Header{"X-Lang": {"de, fr"}, "Cookie": {"lang=en; SSid=1; other=2", "lang=fr", "LANG=de; ssid=3; auth.token=1"},
			"User-Agent": {"Mozilla/5.0 (iPhone; CPU iPhone OS 17_0 like Mac OS X) Mobile/15E148"}})))
		sum.Write([]byte{0xfb})
	}
	// The handler's variant key: Vary's fields as the origin sees them
	// (an edge-set field such as X-Forwarded-For), and the keyed fields
	// no Vary names (an origin's own X- field), hashed.
	h, _ := handlerProxy(t, func(http.ResponseWriter, *http.Request) {}, nil)
	for _, hdr := range []http.Header{
		{"Accept-Encoding": {"gzip"}},
		{"X-Custom-Tenant": {"acme"}, "X-Other": {"1", "2"}},
		{"X-Forwarded-For": {"203.0.113.9"}, "Origin": {"https://app.example"}},
	} {
		r := httptest.NewRequest("GET", "http://example.com/v", nil)
		r.RemoteAddr = "192.0.2.10:4000"
		r.Header = hdr
		sum.Write([]byte(h.varyKey([]string{"origin", "x-forwarded-for"}, r)))
		sum.Write([]byte{0xfa})
	}
	got := hex.EncodeToString(sum.Sum(nil))[:32]
	if got != cacheKeyFingerprint {
		t.Fatalf("the cache-key mapping changed (fingerprint %s, pinned %s under CacheKeyVersion %q): "+
			"bump CacheKeyVersion so that the disk tier drops what the old mapping stored, and pin the new fingerprint",
			got, cacheKeyFingerprint, CacheKeyVersion)
	}
}
