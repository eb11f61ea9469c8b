package proxy

import (
	"io"
	"net/http"
	"sync/atomic"
	"testing"
	"time"
)

// namedFieldsOrigin is an origin that personalises on X-User (declared
// unkeyed by handlerProxy, so one stored copy answers every user) and
// names the personal fields in cc: X-Account carries the user, and
// Set-Cookie too when cookie is set. A conditional request that matches
// is answered 304 with the same fields (as origins that repeat them do).
func namedFieldsOrigin(clk *clock, cc string, cookie bool, slow *atomic.Int32) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Date", clk.Now().Format(http.TimeFormat))
		w.Header().Set("ETag", `"v1"`)
		w.Header().Set("Cache-Control", cc)
		w.Header().Set("X-Shared", "yes")
		if u := r.Header.Get("X-User"); u != "" {
			w.Header().Set("X-Account", u)
			if cookie {
				w.Header().Set("Set-Cookie", "session="+u)
			}
		}
		if slow != nil && slow.Add(-1) >= 0 {
			time.Sleep(300 * time.Millisecond)
		}
		if r.Header.Get("If-None-Match") == `"v1"` {
			w.WriteHeader(http.StatusNotModified)
			return
		}
		_, _ = io.WriteString(w, "page for anyone")
	}
}

// TestNamedFieldsAreTheRequestersAlone holds RFC 9111 §5.2.2.4 and
// §5.2.2.7 as a shared cache may meet them: a response whose
// no-cache="…" or private="…" names fields is stored without them and
// reused fresh; the requester that caused the fetch gets its own, and
// nobody else ever sees them (the suite's
// headers-omit-headers-listed-in-Cache-Control-no-cache).
func TestNamedFieldsAreTheRequestersAlone(t *testing.T) {
	for _, cc := range []string{
		`max-age=60, no-cache="X-Account"`,
		`max-age=60, private="x-account"`,
		`max-age=60, no-cache=X-Account`,
		`max-age=60, no-cache="X-Other, X-Account"`,
	} {
		t.Run(cc, func(t *testing.T) {
			clk := &clock{now: t0}
			h, calls := handlerProxy(t, namedFieldsOrigin(clk, cc, false, nil), func(c *Config) { c.Now = clk.Now })
			a := serve(h, "GET", "/p", "X-User", "alice")
			if got := a.Header().Get("X-Account"); got != "alice" {
				t.Fatalf("alice got X-Account %q, want her own", got)
			}
			clk.Set(t0.Add(time.Second))
			for _, who := range []string{"bob", ""} {
				w := serve(h, "GET", "/p", "X-User", who)
				if got := w.Header().Get("X-Account"); got != "" {
					t.Errorf("%q got X-Account %q (Cache-Status %q): a field the origin named one user's", who, got, w.Header().Get("Cache-Status"))
				}
				if w.Header().Get("X-Shared") != "yes" || w.Body.String() != "page for anyone" {
					t.Errorf("%q: the rest of the response was not kept: %v %q", who, w.Header(), w.Body.String())
				}
				if cs := w.Header().Get("Cache-Status"); cs != "edge; hit" {
					t.Errorf("%q: Cache-Status %q, want a hit (the named fields are not in the copy, so nothing needs revalidating)", who, cs)
				}
			}
			if n := calls.Load(); n != 1 {
				t.Errorf("origin asked %d times, want 1", n)
			}
		})
	}
}

// TestNamedSetCookieIsStoredWithoutIt: no-cache="Set-Cookie" (ASP.NET's
// public pages that set a cookie) is the origin saying the rest is
// anyone's, so the page is stored without the cookie even though
// store_set_cookie is off; a Set-Cookie the origin does not name keeps
// the page out of the store as before.
func TestNamedSetCookieIsStoredWithoutIt(t *testing.T) {
	clk := &clock{now: t0}
	h, calls := handlerProxy(t, namedFieldsOrigin(clk, `public, max-age=60, no-cache="Set-Cookie, X-Account"`, true, nil), func(c *Config) { c.Now = clk.Now })
	a := serve(h, "GET", "/p", "X-User", "alice")
	if a.Header().Get("Set-Cookie") != "session=alice" {
		t.Fatalf("alice did not get her cookie: %v", a.Header())
	}
	b := serve(h, "GET", "/p", "X-User", "bob")
	if got := b.Header().Values("Set-Cookie"); len(got) != 0 || b.Header().Get("X-Account") != "" {
		t.Errorf("bob got Set-Cookie %q, X-Account %q (Cache-Status %q)", got, b.Header().Get("X-Account"), b.Header().Get("Cache-Status"))
	}
	if calls.Load() != 1 {
		t.Errorf("origin asked %d times, want 1 (stored)", calls.Load())
	}

	clk2 := &clock{now: t0}
	h2, calls2 := handlerProxy(t, namedFieldsOrigin(clk2, `public, max-age=60, no-cache="X-Account"`, true, nil), func(c *Config) { c.Now = clk2.Now })
	serve(h2, "GET", "/p", "X-User", "alice")
	b = serve(h2, "GET", "/p", "X-User", "bob")
	if b.Header().Get("Set-Cookie") != "session=bob" || calls2.Load() != 2 {
		t.Errorf("an unnamed Set-Cookie: bob got %q after %d origin requests, want his own after 2 (not stored)", b.Header().Get("Set-Cookie"), calls2.Load())
	}
}

// TestNamedFieldsNeverReachCollapsedFollowers: followers that joined the
// fill of alice's request get the stored copy, without her fields.
func TestNamedFieldsNeverReachCollapsedFollowers(t *testing.T) {
	clk := &clock{now: t0}
	var slow atomic.Int32
	slow.Store(1)
	h, _ := handlerProxy(t, namedFieldsOrigin(clk, `max-age=60, no-cache="Set-Cookie, X-Account"`, true, &slow), func(c *Config) { c.Now = clk.Now })
	out := s7rvCollapse(t, h, "/p", []string{"X-User", "alice"},
		map[string][]string{"f1": nil, "f2": {"X-User", "bob"}, "head": nil, "range": {"Range", "bytes=0-3"}}, map[string]string{"head": "HEAD"})
	if out[0].who != "leader" || out[0].hdr.Get("X-Account") != "alice" {
		t.Errorf("the leader did not get its own fields: %+v", out[0])
	}
	for _, a := range out[1:] {
		if a.hdr.Get("X-Account") != "" || len(a.hdr.Values("Set-Cookie")) != 0 {
			t.Errorf("follower %s got X-Account %q, Set-Cookie %q (Cache-Status %q)", a.who, a.hdr.Get("X-Account"), a.hdr.Values("Set-Cookie"), a.hdr.Get("Cache-Status"))
		}
	}
}

// TestNamedFieldsOfA304AreItsRequestersAlone: the stored copy names
// X-Account; bob's revalidation is answered 304 with X-Account: bob
// (named again, or only by the stored copy's list): bob gets his, the
// updated copy keeps none, and carol's hit after it gets none.
func TestNamedFieldsOfA304AreItsRequestersAlone(t *testing.T) {
	for name, cc304 := range map[string]string{
		"the 304 names it":            `max-age=1, no-cache="X-Account"`,
		"only the stored copy does":   "",
		"the 304 names it in private": `max-age=1, private="X-Account"`,
	} {
		t.Run(name, func(t *testing.T) {
			clk := &clock{now: t0}
			h, _ := handlerProxy(t, func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Date", clk.Now().Format(http.TimeFormat))
				w.Header().Set("ETag", `"v1"`)
				if r.Header.Get("If-None-Match") == `"v1"` {
					if cc304 != "" {
						w.Header().Set("Cache-Control", cc304)
					}
					w.Header().Set("X-Account", r.Header.Get("X-User"))
					w.WriteHeader(http.StatusNotModified)
					return
				}
				w.Header().Set("Cache-Control", `max-age=1, no-cache="X-Account"`)
				w.Header().Set("X-Account", r.Header.Get("X-User"))
				_, _ = io.WriteString(w, "page")
			}, func(c *Config) { c.Now = clk.Now })
			serve(h, "GET", "/p", "X-User", "alice")
			clk.Set(t0.Add(5 * time.Second))
			b := serve(h, "GET", "/p", "X-User", "bob")
			if got := b.Header().Get("X-Account"); got != "bob" {
				t.Errorf("bob's revalidation gave him X-Account %q (Cache-Status %q), want his own", got, b.Header().Get("Cache-Status"))
			}
			c := serve(h, "GET", "/p", "X-User", "carol")
			if got := c.Header().Get("X-Account"); got != "" {
				t.Errorf("carol got X-Account %q (Cache-Status %q)", got, c.Header().Get("Cache-Status"))
			}
			if cs := c.Header().Get("Cache-Status"); cs != "edge; hit" {
				t.Errorf("carol's Cache-Status %q: the revalidated copy was not stored", cs)
			}
		})
	}
}

// TestNamedFieldsTheCopyCannotLoseAreNotStored: a list naming a field the
// stored copy needs (its coding, its lifetime, its Vary), one that
// cannot be read, or one in a targeted field naming a field the copy
// keeps, keeps the response out of the store rather than stripping it.
func TestNamedFieldsTheCopyCannotLoseAreNotStored(t *testing.T) {
	for _, hdr := range []map[string]string{
		{"Cache-Control": `max-age=60, no-cache="Content-Encoding"`},
		{"Cache-Control": `max-age=60, private="cache-control"`},
		{"Cache-Control": `max-age=60, no-cache="Vary"`},
		{"Cache-Control": `max-age=60, no-cache="X-Account`},
		{"Cache-Control": `max-age=60, no-cache="X Account"`},
		{"Cache-Control": `max-age=60, private=" , "`},
		{"Cache-Control": "max-age=60", "CDN-Cache-Control": `max-age=60, private=("a" "b")`},
		{"Cache-Control": "max-age=60", "CDN-Cache-Control": `max-age=60, no-cache="CDN-Cache-Control"`},
	} {
		p := newTestProxy(t, nil)
		hdr["X-Account"] = "alice"
		p.origin.set(originResp{header: hdr, body: "page"})
		p.do("GET", "/p", nil)
		if cs := p.do("GET", "/p", nil).Header().Get("Cache-Status"); cs == "edge; hit" {
			t.Errorf("%v: stored (%q)", hdr, cs)
		}
	}
	// A targeted field's list is honoured too (the union of the lists).
	p := newTestProxy(t, nil)
	p.origin.set(originResp{header: map[string]string{"Cache-Control": "max-age=60", "CDN-Cache-Control": `max-age=60, no-cache="X-Account"`, "X-Account": "alice"}, body: "page"})
	if got := p.do("GET", "/p", nil).Header().Get("X-Account"); got != "alice" {
		t.Fatalf("the requester got X-Account %q", got)
	}
	w := p.do("GET", "/p", nil)
	if w.Header().Get("Cache-Status") != "edge; hit" || w.Header().Get("X-Account") != "" {
		t.Errorf("targeted no-cache=\"X-Account\": %q, X-Account %q", w.Header().Get("Cache-Status"), w.Header().Get("X-Account"))
	}
}
