package proxy

import (
	"crypto/tls"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// TestS7A304ThatSetsACookieIsNotMergedForEveryone: with
// cache.store_set_cookie off (the default), "one user's cookie can never
// reach another" and a 200 that carries Set-Cookie is never stored
// (whySetCookie): the fields the origin sent along with a cookie are
// taken to be that user's. A 304 that carries Set-Cookie is judged after
// the Set-Cookie is stripped (shareable reads the merged header), so the
// fields that came with it (here X-Account naming the user, as a 200 with
// the same fields would never be stored) are merged into the shared entry
// and served to every later user, foreground (a Cookie user's
// revalidation) and background (stale-while-revalidate refresh carrying
// the triggering user's Cookie). RFC 9111 would allow storing them; the
// edge's own rule for Set-Cookie responses does not, and only 304s
// escape it.
//
// Failed before 2026-12-06; fixed: a 304 that sets a cookie answers its requester alone.
func TestS7A304ThatSetsACookieIsNotMergedForEveryone(t *testing.T) {
	for _, swr := range []bool{false, true} {
		name := "foreground"
		if swr {
			name = "stale-while-revalidate"
		}
		t.Run(name, func(t *testing.T) {
			clk := &clock{now: t0}
			h, _ := handlerProxy(t, func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Date", clk.Now().Format(http.TimeFormat))
				w.Header().Set("ETag", `"e"`)
				cc := "max-age=1"
				if swr {
					cc += ", stale-while-revalidate=60"
				}
				w.Header().Set("Cache-Control", cc)
				if c := r.Header.Get("Cookie"); c != "" {
					// The origin renews alice's session and names her.
					w.Header().Set("Set-Cookie", c+"; Path=/")
					w.Header().Set("X-Account", strings.TrimPrefix(c, "sid="))
				}
				if r.Header.Get("If-None-Match") == `"e"` {
					w.WriteHeader(http.StatusNotModified)
					return
				}
				_, _ = io.WriteString(w, "page")
			}, func(c *Config) { c.Now = clk.Now })
			serve(h, "GET", "/p") // anonymous: stored
			clk.Set(t0.Add(5 * time.Second))
			a := serve(h, "GET", "/p", "Cookie", "sid=alice")
			t.Logf("alice: %q X-Account=%q Set-Cookie=%q", a.Header().Get("Cache-Status"), a.Header().Get("X-Account"), a.Header().Values("Set-Cookie"))
			clk.Set(t0.Add(5500 * time.Millisecond))
			b := serve(h, "GET", "/p")
			t.Logf("bob: %v; %q X-Account=%q Set-Cookie=%q", b.Header(), b.Header().Get("Cache-Status"), b.Header().Get("X-Account"), b.Header().Values("Set-Cookie"))
			if b.Header().Get("X-Account") == "alice" {
				t.Errorf("anonymous bob got X-Account: alice, a field of the 304 that set alice's cookie (Cache-Status %q): "+
					"a 304 with Set-Cookie is merged into the shared entry though a 200 with the same fields is never stored (store_set_cookie off)",
					b.Header().Get("Cache-Status"))
			}
		})
	}
}

// TestS7StaleIfErrorNeverServesACopyThatWasNeverShared: origin down;
// stale-if-error must only serve what was stored for everyone. A Cookie
// user's personal heuristic answer, an Authorization user's answer and a
// private answer are never stored, so an anonymous user gets the error,
// not them. Held.
func TestS7StaleIfErrorNeverServesACopyThatWasNeverShared(t *testing.T) {
	clk := &clock{now: t0}
	var down atomic.Bool
	h, _ := handlerProxy(t, func(w http.ResponseWriter, r *http.Request) {
		if down.Load() {
			w.WriteHeader(http.StatusBadGateway)
			return
		}
		w.Header().Set("Date", clk.Now().Format(http.TimeFormat))
		switch r.URL.Path {
		case "/heur":
			w.Header().Set("Last-Modified", t0.Add(-48*time.Hour).Format(http.TimeFormat))
		case "/auth":
			w.Header().Set("Cache-Control", "max-age=1, stale-if-error=600")
		case "/priv":
			w.Header().Set("Cache-Control", "private, max-age=1, stale-if-error=600")
		}
		_, _ = io.WriteString(w, "personal "+r.Header.Get("Cookie")+r.Header.Get("Authorization"))
	}, func(c *Config) { c.Now = clk.Now })
	serve(h, "GET", "/heur", "Cookie", "sid=alice")
	serve(h, "GET", "/auth", "Authorization", "Bearer alice")
	serve(h, "GET", "/priv", "Cookie", "sid=alice")
	down.Store(true)
	clk.Set(t0.Add(10 * time.Second))
	for _, p := range []string{"/heur", "/auth", "/priv"} {
		w := serve(h, "GET", p)
		if strings.Contains(w.Body.String(), "alice") {
			t.Errorf("%s: anonymous user got %q (%q) while the origin is down", p, w.Body.String(), w.Header().Get("Cache-Status"))
		}
	}
}

// TestS7SWRRefreshWithCookieVaryCookie: stale-while-revalidate refresh
// triggered by alice's Cookie; the origin now answers Vary: Cookie with
// her page. Bob (no cookie) must not get it, neither while the refresh
// runs nor after. Held.
func TestS7SWRRefreshWithCookieVaryCookie(t *testing.T) {
	clk := &clock{now: t0}
	var n atomic.Int32
	h, _ := handlerProxy(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Date", clk.Now().Format(http.TimeFormat))
		w.Header().Set("Cache-Control", "max-age=1, stale-while-revalidate=60")
		if n.Add(1) == 1 {
			_, _ = io.WriteString(w, "anonymous page")
			return
		}
		w.Header().Set("Vary", "Cookie")
		_, _ = io.WriteString(w, "page of "+r.Header.Get("Cookie"))
	}, func(c *Config) { c.Now = clk.Now })
	serve(h, "GET", "/home")
	clk.Set(t0.Add(5 * time.Second))
	serve(h, "GET", "/home", "Cookie", "sid=alice")
	for i := range 3 {
		w := serve(h, "GET", "/home")
		if strings.Contains(w.Body.String(), "alice") {
			t.Errorf("bob %d got %q (%q)", i, w.Body.String(), w.Header().Get("Cache-Status"))
		}
	}
}

// TestS7VaryOriginPoisoningOverHTTP2: the Vary key merge of
// TestS7VaryKeyKeepsApartOriginValuesTheOriginTellsApart through HTTP/2 (TLS,
// net/http's server in front of the handler): the same.
//
// Failed before 2026-12-06; fixed: only list fields are read as lists (VaryKey).
func TestS7VaryOriginPoisoningOverHTTP2(t *testing.T) {
	const allowed = "https://app.example"
	h, _ := handlerProxy(t, func(w http.ResponseWriter, r *http.Request) {
		o := r.Header.Get("Origin")
		w.Header().Set("Cache-Control", "public, max-age=600")
		w.Header().Set("Vary", "Origin")
		if o == allowed {
			w.Header().Set("Access-Control-Allow-Origin", o)
		}
		_, _ = io.WriteString(w, "for "+o)
	}, nil)
	edge := httptest.NewUnstartedServer(h)
	edge.EnableHTTP2 = true
	edge.StartTLS()
	defer edge.Close()
	c := edge.Client()
	c.Transport.(*http.Transport).TLSClientConfig = &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"h2"}}
	c.Transport.(*http.Transport).ForceAttemptHTTP2 = true
	r1, _ := s7rvGet(t, c, edge.URL, "/api", "Origin", allowed+", ")
	r2, body := s7rvGet(t, c, edge.URL, "/api", "Origin", allowed)
	t.Logf("proto %s; victim %q ACAO=%q %q", r1.Proto, body, r2.Header.Get("Access-Control-Allow-Origin"), r2.Header.Get("Cache-Status"))
	if r2.Header.Get("Access-Control-Allow-Origin") != allowed {
		t.Errorf("over %s the victim got the attacker's variant %q (Cache-Status %q)", r2.Proto, body, r2.Header.Get("Cache-Status"))
	}
}
