package cluster

import (
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
)

// standsRequest is a purge request whose body is body, with digest in the
// signed field (none if empty).
func standsRequest(body, digest string) *http.Request {
	r := httptest.NewRequest("POST", "http://h/_edge/purge?prefix=/", strings.NewReader(body))
	if digest != "" {
		r.Header.Set(hdrPurgeIDs, digest)
	}
	return r
}

// The ids a purge of everything stands for are taken only as sent: a body
// altered on the way (the MAC covers the fields, the digest the body), an
// empty or oversized list, or none at all names nothing, and the peer
// wipes; one id it never took is enough to wipe too.
func TestTheIDsAPurgeOfEverythingStandsForAreReadAsSent(t *testing.T) {
	good := "a1\nb2\nc3"
	many := strings.Repeat("x\n", standsMax) + "x"
	for _, tc := range []struct {
		name, body, digest string
		want               []string
	}{
		{"as sent", good, idsDigest(good), []string{"a1", "b2", "c3"}},
		{"no digest", good, "", nil},
		{"body altered", "a1\nb2\nzz", idsDigest(good), nil},
		{"digest altered", good, idsDigest("a1"), nil},
		{"too many", many, idsDigest(many), nil},
		{"garbage digest", good, "not hex", nil},
	} {
		if got := readStands(standsRequest(tc.body, tc.digest)); !slices.Equal(got, tc.want) {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
	var s purgeIDs
	s.record("a1")
	s.record("b2")
	for _, tc := range []struct {
		ids  []string
		want bool
	}{{[]string{"a1", "b2"}, true}, {[]string{"a1", "b2", "c3"}, false}, {nil, false}, {[]string{""}, false}} {
		if got := s.tookAll(tc.ids); got != tc.want {
			t.Errorf("tookAll(%q) = %v, want %v", tc.ids, got, tc.want)
		}
	}
}

func FuzzReadStands(f *testing.F) {
	f.Add("a1\nb2", true)
	f.Add("", false)
	f.Fuzz(func(t *testing.T, body string, signed bool) {
		digest := "0000"
		if signed {
			digest = idsDigest(body)
		}
		ids := readStands(standsRequest(body, digest))
		if !signed && ids != nil {
			t.Fatalf("took ids under a wrong digest: %q", ids)
		}
		if len(ids) > standsMax {
			t.Fatalf("%d ids, more than %d", len(ids), standsMax)
		}
		if ids != nil && strings.Join(ids, "\n") != body {
			t.Fatalf("ids %q are not the body %q", ids, body)
		}
	})
}
