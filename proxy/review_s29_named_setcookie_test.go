package proxy

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestS29NamedSetCookieNeverReachesAnotherUser: with
// cache.store_set_cookie off, a page whose list names Set-Cookie is
// stored without it, in whatever spelling, field or combination (Vary:
// Cookie, must-understand with no-store, a targeted field's list), and
// the cookie goes to its requester alone; a heuristic lifetime answering
// a request with a Cookie still keeps the page out. Claim of 982f8ef:
// held.
func TestS29NamedSetCookieNeverReachesAnotherUser(t *testing.T) {
	lm := t0.Add(-48 * time.Hour).Format(http.TimeFormat)
	for _, c := range []struct {
		name      string
		hdr       map[string]string
		cookie    bool // requests carry Cookie: u=<user>
		mustStore bool
	}{
		{"lower case and space", map[string]string{"Cache-Control": `max-age=60, no-cache=" set-cookie "`}, false, true},
		{"vary cookie", map[string]string{"Cache-Control": `public, max-age=60, no-cache="Set-Cookie"`, "Vary": "Cookie"}, true, false},
		{"must-understand no-store", map[string]string{"Cache-Control": `must-understand, no-store, max-age=60, private="Set-Cookie"`}, false, true},
		{"targeted list", map[string]string{"Cache-Control": "max-age=60", "CDN-Cache-Control": `max-age=60, no-cache="Set-Cookie"`}, false, true},
		{"heuristic with a cookie", map[string]string{"Cache-Control": `no-cache="Set-Cookie"`, "Last-Modified": lm}, true, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			clk := &clock{now: t0}
			h, calls := handlerProxy(t, func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Date", clk.Now().Format(http.TimeFormat))
				for k, v := range c.hdr {
					w.Header().Set(k, v)
				}
				w.Header().Set("Set-Cookie", "session="+r.Header.Get("X-User"))
				_, _ = io.WriteString(w, "page")
			}, func(cfg *Config) { cfg.Now = clk.Now })
			if h.policy().StoreSetCookie {
				t.Fatal("the default stores Set-Cookie: this test is about it off")
			}
			req := func(user string) []string {
				hdr := []string{"X-User", user}
				if c.cookie {
					hdr = append(hdr, "Cookie", "u=same")
				}
				return hdr
			}
			a := serve(h, "GET", "/p", req("alice")...)
			if a.Header().Get("Set-Cookie") != "session=alice" {
				t.Fatalf("alice lost her cookie: %v", a.Header())
			}
			stored := false
			for _, who := range []string{"bob", "carol"} {
				w := serve(h, "GET", "/p", req(who)...)
				for _, v := range w.Header().Values("Set-Cookie") {
					if strings.Contains(v, "alice") {
						t.Errorf("%s got Set-Cookie %q (Cache-Status %q)", who, v, w.Header().Get("Cache-Status"))
					}
				}
				stored = stored || w.Header().Get("Cache-Status") == "edge; hit"
			}
			if c.mustStore && !stored {
				t.Errorf("not stored (origin asked %d times)", calls.Load())
			}
			if c.name == "heuristic with a cookie" && stored {
				t.Errorf("a heuristic lifetime answering a request with a Cookie was stored")
			}
		})
	}
}
