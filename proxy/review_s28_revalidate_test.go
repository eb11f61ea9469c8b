package proxy

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// A review found (now mended): a 304 that answers a Cookie user's revalidation with
// `Cache-Control: private` (and a field naming the user) is merged into
// the shared copy and stored for everyone when the stored copy carried a
// targeted field (CDN-Cache-Control / Edge-Cache-Control / Surrogate-Control)
// that the 304 did not repeat. revalidated -> updateFrom304 merges the
// 304's fields over the stored ones; shareable -> storableUnder ->
// effectiveCC then reads the stored (anonymous) response's targeted field,
// which RFC 9213 lets override Cache-Control, so the 304's own `private`
// is ignored. The origin never said its answer to this user may be kept
// by a CDN: its 304 says private and carries no targeted field (a 200 with
// the same header is not stored). Bob gets X-Account: alice as a hit.
// Where: proxy/fetch.go revalidated (shareable on the merged header).
// Fix: judge the 304's own directives too: if the 304 carries a
// Cache-Control (or a targeted field) that by itself forbids storing
// (private, no-store, or Authorization without public/s-maxage/
// must-revalidate), answer it to its requester alone and drop the copy, as
// for whySetCookie; or drop the stored targeted fields when the 304 sends
// a Cache-Control without them.
func TestS28A304PrivateIsNotOverriddenByTheStoredTargetedField(t *testing.T) {
	for _, targeted := range []string{"CDN-Cache-Control", "Edge-Cache-Control", "Surrogate-Control"} {
		t.Run(targeted, func(t *testing.T) {
			clk := &clock{now: t0}
			h, _ := handlerProxy(t, func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Date", clk.Now().Format(http.TimeFormat))
				w.Header().Set("ETag", `"1"`)
				if r.Header.Get("If-None-Match") == `"1"` {
					if u := r.Header.Get("X-User"); u != "" {
						// a logged-in request: the origin marks it private and names the user
						w.Header().Set("Cache-Control", "private, max-age=60")
						w.Header().Set("X-Account", u)
					}
					w.WriteHeader(http.StatusNotModified)
					return
				}
				w.Header().Set("Cache-Control", "max-age=1")
				w.Header().Set(targeted, "max-age=1")
				_, _ = io.WriteString(w, "page")
			}, func(c *Config) { c.Now = clk.Now })
			serve(h, "GET", "/a") // anonymous: stored
			clk.Set(t0.Add(5 * time.Second))
			a := serve(h, "GET", "/a", "X-User", "alice")
			t.Logf("alice: %q X-Account=%q CC=%q", a.Header().Get("Cache-Status"), a.Header().Get("X-Account"), a.Header().Get("Cache-Control"))
			b := serve(h, "GET", "/a")
			t.Logf("bob:   %q X-Account=%q CC=%q", b.Header().Get("Cache-Status"), b.Header().Get("X-Account"), b.Header().Get("Cache-Control"))
			if b.Header().Get("X-Account") == "alice" {
				t.Errorf("anonymous bob got X-Account: alice (Cache-Status %q, Cache-Control %q): alice's 304 said private, "+
					"but the stored copy's %s overrode it and the 304's fields were stored for everyone",
					b.Header().Get("Cache-Status"), b.Header().Get("Cache-Control"), targeted)
			}
		})
	}
}

// A review found (now mended): a 304 answering a request with Authorization is merged into the
// shared copy whenever the *stored* copy says public, though the 304
// itself declares nothing that lets a shared cache reuse an answer to
// credentials (RFC 9111 §3.5: public, s-maxage or must-revalidate). Its
// other fields (here X-Account naming the user) reach every later user as
// a hit. Same shape as the Set-Cookie 304 the project fixed on 2026-12-06
// (TestS7A304ThatSetsACookieIsNotMergedForEveryone): the answer the origin
// gave one user's credentials is judged by the header an anonymous
// response left. Where: proxy/fetch.go revalidated: shareable(e, r, m)
// reads the merged header, whose `public` came from the stored copy.
// Fix: for m.hasAuth, require the 304's own Cache-Control (or targeted
// field) to say public/s-maxage/must-revalidate, else answer it alone
// (like whySetCookie) without merging.
func TestS28A304ToCredentialsIsNotMergedUnderTheStoredPublic(t *testing.T) {
	for _, swr := range []bool{false, true} {
		name := "foreground"
		if swr {
			name = "stale-while-revalidate"
		}
		t.Run(name, func(t *testing.T) {
			clk := &clock{now: t0}
			h, _ := handlerProxy(t, func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Date", clk.Now().Format(http.TimeFormat))
				w.Header().Set("ETag", `"1"`)
				if r.Header.Get("If-None-Match") == `"1"` {
					if a := r.Header.Get("Authorization"); a != "" {
						w.Header().Set("X-Account", strings.TrimPrefix(a, "Bearer "))
					}
					w.WriteHeader(http.StatusNotModified)
					return
				}
				cc := "public, max-age=1"
				if swr {
					cc += ", stale-while-revalidate=60"
				}
				w.Header().Set("Cache-Control", cc)
				_, _ = io.WriteString(w, "page")
			}, func(c *Config) { c.Now = clk.Now })
			serve(h, "GET", "/a") // anonymous: stored
			clk.Set(t0.Add(5 * time.Second))
			a := serve(h, "GET", "/a", "Authorization", "Bearer alice")
			t.Logf("alice: %q X-Account=%q", a.Header().Get("Cache-Status"), a.Header().Get("X-Account"))
			clk.Set(t0.Add(5500 * time.Millisecond))
			b := serve(h, "GET", "/a")
			t.Logf("bob:   %q X-Account=%q", b.Header().Get("Cache-Status"), b.Header().Get("X-Account"))
			if b.Header().Get("X-Account") == "alice" {
				t.Errorf("anonymous bob got X-Account: alice (Cache-Status %q): the 304 to alice's Authorization request carried no public/s-maxage/must-revalidate "+
					"of its own, yet its fields were merged into the shared copy because the stored copy said public", b.Header().Get("Cache-Status"))
			}
		})
	}
}

// A review found (now mended): `no-cache="X-Account"` (RFC 9111 §5.2.2.4: the named field must
// not be reused without revalidation) is neither stripped nor a reason to
// refuse storing: the edge stores alice's 200 with X-Account: alice and,
// after any later user's successful revalidation whose 304 does not repeat
// the field (Go's and most origins' 304s carry few fields), serves alice's
// X-Account to bob and to anonymous users. The origin named the field as
// per-response; a 304 to bob vouches for the representation, not for a
// value the origin never sent him. Where: CacheControl.NoCacheFields only
// feeds Entry.mustRevalidate (proxy/freshness.go); newEntry/updateFrom304
// (proxy/fetch.go) keep the named fields. Fix: parse the field names and
// strip them from the stored header (sharedHeader), so a reuse carries only
// what the validating 304 itself sends (RFC 9111 §5.2.2.4 allows this),
// or refuse to store as for private="…".
func TestS28NoCacheNamedFieldIsNotReusedForAnotherUser(t *testing.T) {
	clk := &clock{now: t0}
	h, _ := handlerProxy(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Date", clk.Now().Format(http.TimeFormat))
		w.Header().Set("ETag", `"1"`)
		w.Header().Set("Cache-Control", `max-age=60, no-cache="X-Account"`)
		if r.Header.Get("If-None-Match") == `"1"` {
			w.WriteHeader(http.StatusNotModified)
			return
		}
		if u := r.Header.Get("X-User"); u != "" {
			w.Header().Set("X-Account", u)
		}
		_, _ = io.WriteString(w, "page")
	}, func(c *Config) { c.Now = clk.Now })
	a := serve(h, "GET", "/a", "X-User", "alice")
	t.Logf("alice: %q X-Account=%q", a.Header().Get("Cache-Status"), a.Header().Get("X-Account"))
	clk.Set(t0.Add(time.Second))
	for _, who := range []string{"bob", ""} {
		var hdr []string
		if who != "" {
			hdr = []string{"X-User", who}
		}
		w := serve(h, "GET", "/a", hdr...)
		t.Logf("%q: %q X-Account=%q", who, w.Header().Get("Cache-Status"), w.Header().Get("X-Account"))
		if w.Header().Get("X-Account") == "alice" {
			t.Errorf("user %q got X-Account: alice (Cache-Status %q), a field the origin marked no-cache=\"X-Account\" and never sent this user",
				who, w.Header().Get("Cache-Status"))
		}
	}
}
