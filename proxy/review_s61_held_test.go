package proxy

import (
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestS61HeldOriginDirectivesKeepUsersApart: origin answers that name one
// user's page or fields in ways the parser does read; each must reach
// bob without alice's page or cookie.
func TestS61HeldOriginDirectivesKeepUsersApart(t *testing.T) {
	for _, tc := range []struct {
		name string
		hdr  [][2]string
		req  string // request field carrying the user
	}{
		{"public-line-then-private-line", [][2]string{{"Cache-Control", "public, max-age=60"}, {"Cache-Control", "PRIVATE"}}, "Cookie"},
		{"s-maxage-with-private", [][2]string{{"Cache-Control", "s-maxage=60, private"}}, "Cookie"},
		{"vary-cookie-odd-spelling", [][2]string{{"Cache-Control", "max-age=60"}, {"Vary", " , cookie,, COOKIE ,"}}, "Cookie"},
		{"vary-star-second-line", [][2]string{{"Cache-Control", "max-age=60"}, {"Vary", "Accept"}, {"Vary", "*"}}, "Cookie"},
		{"credentials-max-age-only", [][2]string{{"Cache-Control", "max-age=60"}}, "Authorization"},
		{"private-empty-quoted-list", [][2]string{{"Cache-Control", `max-age=60, private=""`}}, "Cookie"},
		{"duplicated-max-age", [][2]string{{"Cache-Control", "max-age=60"}, {"Cache-Control", "max-age=3600"}}, "Cookie"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, _ := handlerProxy(t, func(w http.ResponseWriter, r *http.Request) {
				for _, kv := range tc.hdr {
					w.Header().Add(kv[0], kv[1])
				}
				_, _ = w.Write([]byte("page of " + r.Header.Get(tc.req)))
			}, nil)
			serve(h, "GET", "/p", tc.req, "alice")
			b := serve(h, "GET", "/p", tc.req, "bob")
			if b.Body.String() != "page of bob" {
				t.Errorf("%v: bob got %q (Cache-Status %q)", tc.hdr, b.Body.String(), b.Header().Get("Cache-Status"))
			}
		})
	}
}

// TestS61HeldNamedAndRevalidationCookiesStayTheirs: a Set-Cookie the
// origin names in private="Set-Cookie" (odd spacing, upper case), and a
// Set-Cookie or private on a 304 that refreshes a shared copy, reach the
// requester alone.
func TestS61HeldNamedAndRevalidationCookiesStayTheirs(t *testing.T) {
	t.Run("private-named-set-cookie", func(t *testing.T) {
		h, _ := handlerProxy(t, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Cache-Control", `max-age=60, Private = " set-cookie ,X-Account "`)
			w.Header().Set("Set-Cookie", "sid="+r.Header.Get("X-User"))
			w.Header().Set("X-Account", r.Header.Get("X-User"))
			_, _ = w.Write([]byte("same page"))
		}, nil)
		a := serve(h, "GET", "/p", "X-User", "alice")
		if a.Header().Get("Set-Cookie") != "sid=alice" {
			t.Fatalf("alice's own cookie: %q", a.Header().Get("Set-Cookie"))
		}
		b := serve(h, "GET", "/p", "X-User", "bob")
		if !strings.Contains(b.Header().Get("Cache-Status"), "hit") {
			t.Fatalf("not stored: %q", b.Header().Get("Cache-Status"))
		}
		if c, acct := b.Header().Get("Set-Cookie"), b.Header().Get("X-Account"); c != "" || acct != "" {
			t.Errorf("bob's hit carries Set-Cookie %q, X-Account %q", c, acct)
		}
	})
	for _, cc304 := range []string{"", "private"} {
		t.Run("304-set-cookie-"+cc304, func(t *testing.T) {
			clk := &clock{now: t0}
			h, _ := handlerProxy(t, func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Date", clk.Now().Format(http.TimeFormat))
				w.Header().Set("ETag", `"v1"`)
				if r.Header.Get("If-None-Match") == `"v1"` {
					if cc304 != "" {
						w.Header().Set("Cache-Control", cc304)
					} else {
						w.Header().Set("Cache-Control", "max-age=60")
					}
					w.Header().Set("Set-Cookie", "sid="+r.Header.Get("X-User"))
					w.Header().Set("X-Account", r.Header.Get("X-User"))
					w.WriteHeader(http.StatusNotModified)
					return
				}
				w.Header().Set("Cache-Control", "max-age=60")
				_, _ = w.Write([]byte("same page"))
			}, func(c *Config) { c.Now = clk.Now })
			serve(h, "GET", "/p", "X-User", "first")
			clk.Set(t0.Add(2 * time.Minute))
			if a := serve(h, "GET", "/p", "X-User", "alice"); a.Header().Get("Set-Cookie") != "sid=alice" {
				t.Fatalf("alice's revalidation: Set-Cookie %q", a.Header().Get("Set-Cookie"))
			}
			b := serve(h, "GET", "/p", "X-User", "bob")
			if c := b.Header().Get("Set-Cookie"); c == "sid=alice" || b.Header().Get("X-Account") == "alice" {
				t.Errorf("bob (%q) got alice's 304 fields: Set-Cookie %q, X-Account %q", b.Header().Get("Cache-Status"), c, b.Header().Get("X-Account"))
			}
		})
	}
}
