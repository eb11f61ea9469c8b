package proxy

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// Regression test for a bug found in review: a 304 that says private (and carries a per-user field) is merged into
// the shared entry and served to another user.
func TestHostile304PrivateHeadersMerged(t *testing.T) {
	clk := &clock{now: t0}
	h, _ := handlerProxy(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Date", clk.Now().Format(http.TimeFormat))
		w.Header().Set("ETag", `"1"`)
		if r.Header.Get("If-None-Match") == `"1"` {
			// a logged-in request: the origin marks it private and names the user
			w.Header().Set("Cache-Control", "private, max-age=60")
			w.Header().Set("X-Account", r.Header.Get("X-User"))
			w.WriteHeader(http.StatusNotModified)
			return
		}
		w.Header().Set("Cache-Control", "public, max-age=1")
		_, _ = io.WriteString(w, "page")
	}, func(c *Config) { c.Now = clk.Now })
	serve(h, "GET", "/a", "X-User", "anon")
	clk.Set(t0.Add(5 * time.Second))
	w := serve(h, "GET", "/a", "X-User", "alice")
	t.Logf("alice: %s %v", w.Header().Get("Cache-Status"), w.Header())
	w = serve(h, "GET", "/a", "X-User", "bob")
	t.Logf("bob: %s", w.Header().Get("Cache-Status"))
	if w.Header().Get("X-Account") == "alice" {
		t.Errorf("bob received alice's 304 field X-Account=alice and Cache-Control %q (Cache-Status %q)", w.Header().Get("Cache-Control"), w.Header().Get("Cache-Status"))
	}
}

// Regression test for a bug found in review: a stale-while-revalidate refresh triggered by a request with
// Authorization is stored as if it had none.
func TestHostileSWRRefreshWithAuthorizationStored(t *testing.T) {
	clk := &clock{now: t0}
	h, _ := handlerProxy(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Date", clk.Now().Format(http.TimeFormat))
		if a := r.Header.Get("Authorization"); a != "" {
			// authenticated: personal page, fresh for a minute (no public/s-maxage:
			// a shared cache must not store it, RFC 9111 §3.5)
			w.Header().Set("Cache-Control", "max-age=60")
			_, _ = io.WriteString(w, "private page of "+a)
			return
		}
		w.Header().Set("Cache-Control", "public, max-age=1, stale-while-revalidate=60")
		_, _ = io.WriteString(w, "anonymous page")
	}, func(c *Config) { c.Now = clk.Now })
	serve(h, "GET", "/home")
	clk.Set(t0.Add(3 * time.Second))
	w := serve(h, "GET", "/home", "Authorization", "Bearer alice-token")
	t.Logf("alice: %s %q", w.Header().Get("Cache-Status"), w.Body.String())
	w = serve(h, "GET", "/home")
	t.Logf("anonymous bob: %s %q", w.Header().Get("Cache-Status"), w.Body.String())
	if strings.Contains(w.Body.String(), "alice") {
		t.Errorf("anonymous user received alice's authenticated page: %q", w.Body.String())
	}
}
