package rules

import (
	"net/http"
	"strings"
	"testing"
)

// s15Reached reports which rule names the pickers ever return for the
// probes: every method, path spelling (case, percent, ambiguous) and status.
func s15Reached(s *Set) map[string]bool {
	seen := map[string]bool{}
	paths := []string{"/", "/a", "/A/B", "/img/x.png", "/IMG/X.PNG", "/%69mg/x", "/a//b", "/a;b", "/x/../y", "/%41", "/*"}
	hdrs := []http.Header{nil, {"Cookie": {"sid=1"}}}
	for _, m := range []string{"GET", "HEAD", "POST", "OPTIONS", "PURGE"} {
		for _, p := range paths {
			for _, h := range hdrs {
				if r := s.ForRequest(m, p, h); r != nil {
					seen[r.Name] = true
				}
				for _, st := range []int{200, 404, 500} {
					if r := s.ForResponse(m, p, h, st); r != nil {
						seen[r.Name] = true
					}
				}
			}
			if r := s.ForKey(p, "a=1"); r != nil {
				seen[r.Name] = true
			}
		}
	}
	return seen
}

// HOLDS: for every set Warnings flags, no probe (GET/HEAD/other methods,
// upper-case and percent-encoded spellings against lower- and upper-case
// patterns, ambiguous paths, cookies, statuses) reaches a flagged rule,
// including sets where case folding makes pick look past the exact match.
func TestS15WarningsNoFalsePositiveHolds(t *testing.T) {
	for _, src := range []string{
		`[{name: all, ttl: 1m}, {name: img, match: {path: /img/}, bypass: true}]`,
		`[{name: root, match: {path: /}, ttl: 1m}, {name: img-up, match: {path: /IMG/}, bypass: true}]`,
		`[{name: low, match: {path: /api/}, bypass: true}, {name: star, match: {path: "*"}, ttl: 1m}, {name: up, match: {path: /API/}, key: {cookies: [sid]}}]`,
		`[{name: slashstar, match: {path: "/*"}, ttl: 1m}, {name: head, match: {methods: [HEAD]}, bypass: true}, {name: c, match: {cookie: sid}, bypass: true}, {name: s, match: {status: [404]}, ttl: 1h}]`,
	} {
		s := mustParse(t, src)
		warned := map[string]bool{}
		for _, w := range s.Warnings() {
			for _, r := range s.Rules {
				if strings.Contains(w, `("`+r.Name+`") is never used`) {
					warned[r.Name] = true
				}
			}
		}
		if len(warned) == 0 {
			t.Errorf("%s: no warning", src)
		}
		for name := range s15Reached(s) {
			if warned[name] {
				t.Errorf("%s: %q warned never used, yet a request reaches it", src, name)
			}
		}
	}
}

// HOLDS: a target that does not start with '/' ("*" of OPTIONS *, the
// empty path of an absolute-form target without one) does not reach a rule
// behind path "/" either (a rule without a path matches only '/' paths).
func TestS15WarningsSlashCatchAllAndEmptyPathHolds(t *testing.T) {
	s := mustParse(t, `[{name: root, match: {path: /}, ttl: 1m}, {name: late, bypass: true}]`)
	if len(s.Warnings()) != 1 {
		t.Fatalf("warnings %q", s.Warnings())
	}
	for _, p := range []string{"", "*"} {
		if r := s.ForRequest("GET", p, nil); r != nil && r.Name == "late" {
			t.Errorf("path %q reaches %q, which Warnings calls never used", p, r.Name)
		}
	}
}
