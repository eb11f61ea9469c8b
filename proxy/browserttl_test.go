package proxy

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func TestBrowserCacheControl(t *testing.T) {
	for _, tc := range []struct {
		name    string
		cc      []string
		age     string
		cookie  bool
		want    string // "" with changed false: left as it was
		changed bool
	}{
		{"max-age replaced", []string{"public, max-age=3600"}, "", false, "public, max-age=600", true},
		{"Age added", []string{"max-age=3600"}, "120", false, "max-age=720", true},
		{"none given", nil, "", false, "max-age=600", true},
		{"s-maxage and extensions kept", []string{"s-maxage=86400, Max-Age=5, stale-while-revalidate=30", "immutable"}, "0", false, "s-maxage=86400, stale-while-revalidate=30, immutable, max-age=600", true},
		{"quoted value kept quoted", []string{`max-age=1, ext="a, b"`}, "", false, `ext="a, b", max-age=600`, true},
		{"quote inside re-escaped", []string{`ext="a\"b", max-age=1`}, "", false, `ext="a\"b", max-age=600`, true},
		{"private", []string{"private, max-age=60"}, "", false, "", false},
		{"no-store", []string{"no-store"}, "", false, "", false},
		{"no-cache", []string{"max-age=60", `no-cache="Set-Cookie"`}, "", false, "", false},
		{"sets a cookie", []string{"public, max-age=60"}, "", true, "", false},
		{"unterminated quote", []string{`max-age=60, ext="a`}, "", false, "", false},
		{"value without a name", []string{"=5"}, "", false, "", false},
		{"bad Age ignored", []string{"max-age=60"}, "x", false, "max-age=600", true},
	} {
		h := http.Header{"Expires": {"Thu, 01 Jan 1970 00:00:00 GMT"}}
		if tc.cc != nil {
			h["Cache-Control"] = tc.cc
		}
		if tc.age != "" {
			h["Age"] = []string{tc.age}
		}
		if tc.cookie {
			h["Set-Cookie"] = []string{"sid=1"}
		}
		before := h.Clone()
		changed := browserCacheControl(h, 10*time.Minute)
		switch {
		case changed != tc.changed:
			t.Errorf("%s: changed %v, want %v (%q)", tc.name, changed, tc.changed, h["Cache-Control"])
		case !changed && !equalHeaders(h, before):
			t.Errorf("%s: left alone, yet the header changed: %v → %v", tc.name, before, h)
		case changed && (h.Get("Cache-Control") != tc.want || len(h["Cache-Control"]) != 1 || h["Expires"] != nil):
			t.Errorf("%s: Cache-Control %q Expires %q, want %q and no Expires", tc.name, h["Cache-Control"], h["Expires"], tc.want)
		}
	}
}

// TestSharedFreshForAPersonalRequest: the answer to a request with a
// cookie or credentials is rewritten only when this cache shared it: a
// fresh hit, or stored with a lifetime above zero however the origin
// spelt it.
func TestSharedFreshForAPersonalRequest(t *testing.T) {
	h, _ := handlerProxy(t, func(http.ResponseWriter, *http.Request) {}, nil)
	now := time.Now().UTC()
	for _, tc := range []struct {
		cc, expires, status string
		want                bool
	}{
		{"public, max-age=3600", "", "edge; hit", true},
		{"public, max-age=3600", "", "edge; fwd=uri-miss; fwd-status=200; stored", true},
		{"", now.Add(time.Hour).Format(http.TimeFormat), "edge; hit", true},
		{"public, max-age=3600", "", "edge; fwd=uri-miss; fwd-status=200", false},                            // sent on, not shared
		{"public, max-age=3600", "", "edge; fwd=uri-miss; fwd-status=200; detail=personal-heuristic", false}, // likewise
		{"public, max-age=3600", "", "peer; hit, edge; fwd=uri-miss; fwd-status=200", false},                 // the peer's member is not this cache's
		{"max-age=0, must-revalidate", "", "edge; fwd=uri-miss; fwd-status=200; stored", false},
		{"max-age=00, must-revalidate", "", "edge; fwd=uri-miss; fwd-status=200; stored", false},
		{`max-age="0", must-revalidate`, "", "edge; fwd=stale; fwd-status=304; stored", false},
		{"s-maxage=0, max-age=60", "", "edge; fwd=stale; fwd-status=304; stored", false},
		{"must-revalidate", now.Format(http.TimeFormat), "edge; fwd=uri-miss; fwd-status=200; stored", false},
		{"", "", "edge; fwd=uri-miss; fwd-status=200; stored", false}, // heuristic at most
		{"", "", "edge; hit", true}, // the shared copy (a rule's default_ttl)
		{"public, max-age=3600", "", "", false},
	} {
		hdr := http.Header{"Date": {now.Format(http.TimeFormat)}}
		if tc.cc != "" {
			hdr["Cache-Control"] = []string{tc.cc}
		}
		if tc.expires != "" {
			hdr["Expires"] = []string{tc.expires}
		}
		if tc.status != "" {
			hdr["Cache-Status"] = []string{tc.status}
		}
		if got := h.sharedFresh(hdr, http.StatusOK); got != tc.want {
			t.Errorf("%q, Expires %q, under %q: sharedFresh %v, want %v", tc.cc, tc.expires, tc.status, got, tc.want)
		}
	}
}

func equalHeaders(a, b http.Header) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if strings.Join(v, "\x00") != strings.Join(b[k], "\x00") {
			return false
		}
	}
	return true
}

// TestBrowserTTLRewritesOnlyWhatClientsAreSent: a rule's browser_ttl is
// the max-age clients are sent (miss, hit with its Age, 304, HEAD), while
// the edge keeps the page as long as the origin said and a peer is sent
// the origin's field; personal answers are left as they are.
func TestBrowserTTLRewritesOnlyWhatClientsAreSent(t *testing.T) {
	p := newRuleProxy(t, ruleSite(t, `[{name: pages, browser_ttl: 10m}]`), func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/mine":
			w.Header().Set("Cache-Control", "private, max-age=60")
		case "/cookie":
			w.Header().Set("Cache-Control", "public, max-age=3600")
			w.Header().Set("Set-Cookie", "sid="+r.Header.Get("X-User"))
		default:
			w.Header().Set("Cache-Control", "public, max-age=3600")
			w.Header().Set("Expires", "Thu, 01 Jan 2099 00:00:00 GMT")
		}
		w.Header().Set("ETag", `"v1"`)
		_, _ = w.Write([]byte("page " + r.URL.Path))
	}, nil)
	check := func(what string, w *httptest.ResponseRecorder, code int, cc string) {
		t.Helper()
		if w.Code != code || w.Header().Get("Cache-Control") != cc || w.Header().Get("Expires") != "" {
			t.Errorf("%s: %d Cache-Control %q Expires %q (Cache-Status %q), want %d %q and no Expires",
				what, w.Code, w.Header().Get("Cache-Control"), w.Header().Get("Expires"), w.Header().Get("Cache-Status"), code, cc)
		}
	}
	check("miss", p.get("/p"), 200, "public, max-age=600")
	p.advance(5 * time.Minute)
	check("hit five minutes later (Age 300)", p.get("/p"), 200, "public, max-age=900")
	check("304", p.get("/p", "If-None-Match", `"v1"`), 304, "public, max-age=900")
	head := httptest.NewRequest("HEAD", "http://shop.test/p", nil)
	hw := httptest.NewRecorder()
	p.h.ServeInbound(hw, head, Inbound{Site: p.site})
	check("HEAD", hw, 200, "public, max-age=900")
	// The edge's own lifetime is the origin's hour: still a hit at 50 min.
	p.advance(45 * time.Minute)
	if w := p.get("/p"); !strings.Contains(w.Header().Get("Cache-Status"), "hit") || p.calls.Load() != 1 {
		t.Errorf("50 minutes in: %q after %d origin calls; the edge's lifetime is the origin's hour", w.Header().Get("Cache-Status"), p.calls.Load())
	}
	// A peer's request: the origin's field, for the peer's own freshness.
	pr := httptest.NewRequest("GET", "http://shop.test/p", nil)
	pw := httptest.NewRecorder()
	p.h.ServeInbound(pw, pr, Inbound{Site: p.site, Relayed: true})
	if cc := pw.Header().Get("Cache-Control"); cc != "public, max-age=3600" || pw.Header().Get("Expires") == "" {
		t.Errorf("a peer was sent Cache-Control %q, Expires %q: the origin's, please", cc, pw.Header().Get("Expires"))
	}
	// Personal answers: as the origin made them, for every user.
	if cc := p.get("/mine").Header().Get("Cache-Control"); cc != "private, max-age=60" {
		t.Errorf("private answer: Cache-Control %q", cc)
	}
	for _, user := range []string{"a", "b"} {
		w := p.get("/cookie", "X-User", user)
		if cc := w.Header().Get("Cache-Control"); cc != "public, max-age=3600" {
			t.Errorf("user %s: a Set-Cookie answer's Cache-Control became %q", user, cc)
		}
		if sc := w.Header().Get("Set-Cookie"); sc != "" && sc != "sid="+user {
			t.Errorf("user %s was sent another user's cookie %q", user, sc)
		}
	}
}
