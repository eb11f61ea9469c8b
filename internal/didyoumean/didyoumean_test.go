package didyoumean

import "testing"

func TestSuggest(t *testing.T) {
	known := []string{"ttl", "default_ttl", "max_ttl", "cache.max_bytes", "EDGE_CACHE_MAX_BYTES"}
	for _, tc := range []struct{ in, want string }{
		{"tll", ` (did you mean "ttl"?)`},
		{"defualt_ttl", ` (did you mean "default_ttl"?)`},
		{"cache.max_byte", ` (did you mean "cache.max_bytes"?)`},
		{"EDGE_CACHE_MAXBYTES", ` (did you mean "EDGE_CACHE_MAX_BYTES"?)`},
		{"colour", ""},
		{"", ""},
	} {
		if got := Suggest(tc.in, known); got != tc.want {
			t.Errorf("%q: got %q, want %q", tc.in, got, tc.want)
		}
	}
}
