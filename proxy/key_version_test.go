package proxy

import (
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"net/url"
	"testing"
)

// cacheKeyFingerprint is a hash of what CacheKey and VaryKey make of
// keyVersionInputs under CacheKeyVersion. A change to how requests map to
// keys changes it: then bump CacheKeyVersion (so that the disk tier drops
// what the old mapping stored) and update both.
const cacheKeyFingerprint = "23ee54ca15f2bc57169fcdf074605b8d"

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
	got := hex.EncodeToString(sum.Sum(nil))[:32]
	if got != cacheKeyFingerprint {
		t.Fatalf("the cache-key mapping changed (fingerprint %s, pinned %s under CacheKeyVersion %q): "+
			"bump CacheKeyVersion so that the disk tier drops what the old mapping stored, and pin the new fingerprint",
			got, cacheKeyFingerprint, CacheKeyVersion)
	}
}
