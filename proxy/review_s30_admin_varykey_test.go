package proxy

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// s30admFilesHolding names the files under dir that contain s.
func s30admFilesHolding(t *testing.T, dir, s string) []string {
	t.Helper()
	var where []string
	_ = filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err == nil && !fi.IsDir() {
			if b, _ := os.ReadFile(p); strings.Contains(string(b), s) {
				where = append(where, filepath.Base(p))
			}
		}
		return nil
	})
	return where
}

// s30admOldVaryValue is what VaryKey version 3 wrote for a field that is no
// list: its lines, trimmed at their ends, joined by '\n'.
func s30admOldVaryValue(vs []string) string {
	out := make([]string, len(vs))
	for i, v := range vs {
		out[i] = strings.Trim(v, " \t")
	}
	return strings.Join(out, "\n")
}

// Claim held: the digest keeps version 3's equivalence exactly: two
// spellings of Cookie, Authorization or Proxy-Authorization select the
// same variant under the digest if and only if they did under the raw
// values (trim at the ends of each line, lines in order, an absent field
// apart from an empty one), so no two different cookies now share a
// variant and no spelling that shared one before is split apart.
func TestS30AdminVaryDigestKeepsTheOldEquivalence(t *testing.T) {
	spellings := [][]string{
		nil, {""}, {" "}, {"a=1"}, {" a=1"}, {"a=1 "}, {"\ta=1\t"}, {"A=1"}, {"a=1;b=2"}, {"a=1; b=2"}, {"a=1;  b=2"},
		{"a=1", "b=2"}, {"b=2", "a=1"}, {"a=1", ""}, {"", "a=1"}, {"a=1\n"}, {"a=1", "b=2", ""}, {"a=1,b=2"}, {"a=1, b=2"},
		{"Bearer tok"}, {"bearer tok"}, {"Bearer  tok"}, {"Bearer tok", "Bearer tok"}, {"a"}, {"a\x01"}, {"#"},
	}
	for _, name := range []string{"cookie", "authorization", "proxy-authorization"} {
		canon := http.CanonicalHeaderKey(name)
		for i, x := range spellings {
			for j, y := range spellings {
				hx, hy := http.Header{}, http.Header{}
				if x != nil {
					hx[canon] = x
				}
				if y != nil {
					hy[canon] = y
				}
				newEq := VaryKey([]string{name}, hx) == VaryKey([]string{name}, hy)
				oldEq := (x == nil) == (y == nil) && (x == nil || s30admOldVaryValue(x) == s30admOldVaryValue(y))
				if newEq != oldEq {
					t.Errorf("%s: %q (%d) and %q (%d): same variant now %v, before %v", name, x, i, y, j, newEq, oldEq)
				}
			}
		}
	}
	// Many distinct cookies, no two on one variant.
	seen := map[string]int{}
	for i := range 20000 {
		k := VaryKey([]string{"cookie"}, http.Header{"Cookie": {fmt.Sprintf("session=%d", i)}})
		if j, ok := seen[k]; ok {
			t.Fatalf("session=%d and session=%d share a variant", i, j)
		}
		seen[k] = i
	}
}

// Claim held: with Vary on Cookie, Authorization and Proxy-Authorization
// (spelt in lower case, on two Vary lines, with two Cookie lines), no
// value reaches a disk record or the snapshot in clear; and each user gets
// only their own variant back after a restart.
func TestS30AdminVaryCredentialsStayOffDiskAndApart(t *testing.T) {
	origin := func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "public, max-age=600")
		w.Header().Add("Vary", "cookie")
		w.Header().Add("Vary", "AUTHORIZATION, proxy-authorization")
		who := "nobody"
		for _, u := range []string{"alice", "bob", "carol"} {
			if strings.Contains(r.Header.Get("Cookie"), "session="+u) {
				who = u
			}
		}
		_, _ = io.WriteString(w, "page for "+who)
	}
	dir := t.TempDir()
	h, _, tier := s29Node(t, dir, origin, nil)
	s29Serve(h, "/account", false, "Cookie", "session=alice-sess-4242", "Cookie", "pref=alice-pref-99", "Authorization", "Basic YWxpY2U6YWxpY2UtcHc=", "Proxy-Authorization", "Bearer alice-proxy-31")
	s29Serve(h, "/account", false, "Cookie", "session=bob-sess-5353", "Authorization", "Bearer bob-tok-888")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := tier.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if tier.Stats().Writes < 2 {
		t.Fatalf("not written to disk (%+v)", tier.Stats())
	}
	if err := tier.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, secret := range []string{"alice-sess-4242", "alice-pref-99", "YWxpY2U6YWxpY2UtcHc", "alice-proxy-31", "bob-sess-5353", "bob-tok-888"} {
		if where := s30admFilesHolding(t, dir, secret); len(where) > 0 {
			t.Errorf("%q written in clear to %v", secret, where)
		}
	}
	// After the restart, each user is answered from their own record, and
	// a user sending the same cookie spelt otherwise (space around it)
	// still gets theirs; another user's cookie goes to the origin.
	h2, calls, _ := s29Node(t, dir, origin, nil)
	alice := []string{"Cookie", " session=alice-sess-4242 ", "Cookie", "pref=alice-pref-99", "Authorization", "Basic YWxpY2U6YWxpY2UtcHc=", "Proxy-Authorization", "Bearer alice-proxy-31"}
	if w := s29Serve(h2, "/account", false, alice...); w.Body.String() != "page for alice" || calls.Load() != 0 {
		t.Errorf("alice after the restart: %q, %d origin calls", w.Body.String(), calls.Load())
	}
	if w := s29Serve(h2, "/account", false, "Cookie", "session=bob-sess-5353", "Authorization", "Bearer bob-tok-888"); w.Body.String() != "page for bob" {
		t.Errorf("bob after the restart: %q", w.Body.String())
	}
	if w := s29Serve(h2, "/account", false, "Cookie", "session=carol-sess-1", "Authorization", "Bearer bob-tok-888"); w.Body.String() != "page for carol" {
		t.Errorf("carol with bob's token after the restart: %q", w.Body.String())
	}
}

// A review found (now mended): credentialFields names only Cookie, Authorization and
// Proxy-Authorization; any other request field a Vary names is written
// into the variant key as sent, and the variant key goes into the disk
// tier's record and snapshot. An unknown field is kept off the disk only
// because a variant made for keyed fields is never written there; once
// the operator declares it in forwarding.unkeyed_headers (an API key most
// answers ignore, shared across keys, with Vary: X-Api-Key on the few
// that differ), its value lies on disk in clear, which
// docs/operations.md rules out ("a credential in a custom field never
// reaches the disk") and which key version 4 meant to end. Steps:
// forwarding.unkeyed_headers [X-Api-Key]; an origin answering public,
// max-age=600 with Vary: X-Api-Key; a GET with X-Api-Key:
// alice-api-key-6161; flush and close the tier; grep its directory. Expected: the key's value is not on disk (digest every
// Vary-named field that is no list, or at least every field the edge does
// not know as harmless, as fieldKey does).
func TestS30AdminVaryOnAnAPIKeyFieldStaysOffDisk(t *testing.T) {
	origin := func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "public, max-age=600")
		w.Header().Set("Vary", "X-Api-Key")
		_, _ = io.WriteString(w, "quota page")
	}
	dir := t.TempDir()
	h, _, tier := s29Node(t, dir, origin, func(c *Config) {
		c.UnkeyedRequestHeaders = append(c.UnkeyedRequestHeaders, "X-Api-Key")
	})
	s29Serve(h, "/v1/quota", false, "X-Api-Key", "alice-api-key-6161")
	s29FlushAndClose(t, tier)
	if where := s30admFilesHolding(t, dir, "alice-api-key-6161"); len(where) > 0 {
		t.Errorf("the API key a Vary names is written in clear to %v", where)
	}
}
