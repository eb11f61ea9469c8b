package proxy

import (
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// s28render is what the test origin makes of a request: the values of
// the fields it declares in Vary (and of Authorization where it renders
// it), as it sees them.
func s28render(vary []string, hd http.Header) string {
	var b strings.Builder
	for _, n := range vary {
		b.WriteString(n + "=" + strings.Join(hd.Values(n), "\n") + ";")
	}
	return b.String()
}

// TestS28CollapsedFollowersGetWhatTheOriginWouldHaveAnsweredThemAlone: for
// each way a response is selected (Vary on Cookie, Accept-Language, an
// origin's own field, Origin with a trailing comma, two fields at once;
// a Range leader; an origin's own field rendered without Vary, which the
// edge keys itself; an answer that renders Authorization without being
// marked shareable), a leader's fetch is held at
// the origin and followers with other values (GET, HEAD, Range, with
// Authorization, with request directives) arrive during it. Each follower
// must get the answer the origin renders for its own fields. Held on the
// current code.
func TestS28CollapsedFollowersGetWhatTheOriginWouldHaveAnsweredThemAlone(t *testing.T) {
	type req struct {
		hdr    []string
		method string
	}
	cases := []struct {
		name    string
		vary    []string
		cc      string
		leader  []string
		follows map[string]req
	}{
		{"cookie", []string{"Cookie"}, "max-age=60", []string{"Cookie", "sid=L"}, map[string]req{
			"none": {}, "other": {hdr: []string{"Cookie", "sid=A"}}, "same": {hdr: []string{"Cookie", "sid=L"}},
			"two-lines": {hdr: []string{"Cookie", "sid=L", "Cookie", "x=1"}}, "head": {hdr: []string{"Cookie", "sid=A"}, method: "HEAD"},
			"range": {hdr: []string{"Cookie", "sid=A", "Range", "bytes=0-2"}}, "no-cache": {hdr: []string{"Cookie", "sid=A", "Cache-Control", "no-cache"}},
			"no-store": {hdr: []string{"Cookie", "sid=A", "Cache-Control", "no-store"}}, "max-age0": {hdr: []string{"Cookie", "sid=A", "Cache-Control", "max-age=0"}},
		}},
		{"lang", []string{"Accept-Language"}, "max-age=60", []string{"Accept-Language", "de"}, map[string]req{
			"none": {}, "en": {hdr: []string{"Accept-Language", "en"}}, "de": {hdr: []string{"Accept-Language", "de"}},
			"de-en": {hdr: []string{"Accept-Language", "de, en"}}, "head-en": {hdr: []string{"Accept-Language", "en"}, method: "HEAD"},
			"range-en": {hdr: []string{"Accept-Language", "en", "Range", "bytes=0-2"}},
		}},
		{"custom", []string{"X-Tenant"}, "max-age=60", []string{"X-Tenant", "a"}, map[string]req{
			"none": {}, "b": {hdr: []string{"X-Tenant", "b"}}, "a": {hdr: []string{"X-Tenant", "a"}}, "a-comma": {hdr: []string{"X-Tenant", "a,"}},
			"head-b": {hdr: []string{"X-Tenant", "b"}, method: "HEAD"},
		}},
		{"origin", []string{"Origin"}, "max-age=60", []string{"Origin", "https://a.example"}, map[string]req{
			"comma": {hdr: []string{"Origin", "https://a.example,"}}, "b": {hdr: []string{"Origin", "https://b.example"}}, "none": {},
		}},
		{"two", []string{"Accept-Language", "Cookie"}, "max-age=60", []string{"Cookie", "sid=L", "Accept-Language", "de"}, map[string]req{
			"cookie-only": {hdr: []string{"Cookie", "sid=L"}}, "lang-only": {hdr: []string{"Accept-Language", "de"}},
			"swap": {hdr: []string{"Cookie", "sid=A", "Accept-Language", "de"}},
		}},
		{"cookie-range-leader", []string{"Cookie"}, "max-age=60", []string{"Cookie", "sid=L", "Range", "bytes=0-2"}, map[string]req{
			"none": {}, "other": {hdr: []string{"Cookie", "sid=A"}}, "same": {hdr: []string{"Cookie", "sid=L"}},
			"other-range": {hdr: []string{"Cookie", "sid=A", "Range", "bytes=0-2"}},
		}},
		{"keyed", nil, "max-age=60", []string{"X-Tenant", "a"}, map[string]req{
			"none": {}, "b": {hdr: []string{"X-Tenant", "b"}}, "a": {hdr: []string{"X-Tenant", "a"}},
			"range-b": {hdr: []string{"X-Tenant", "b", "Range", "bytes=0-2"}}, "head-none": {method: "HEAD"},
		}},
		// Not "public": RFC 9111 §3.5 lets a shared cache store a public
		// answer to a request with credentials and give it to everyone, so
		// with public the copy anon hits is whichever fill ended last (a
		// loaded make test stored alice's after the leader's; anon, come
		// after both, got it). Unmarked, alice's answers are hers alone,
		// whatever the order.
		{"auth", nil, "max-age=60", nil, map[string]req{
			"alice": {hdr: []string{"Authorization", "Bearer alice"}}, "anon": {},
			"alice-head": {hdr: []string{"Authorization", "Bearer alice"}, method: "HEAD"},
		}},
	}
	var mu sync.Mutex
	first := map[string]bool{}
	h, _ := handlerProxy(t, func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		slow := !first[r.URL.Path]
		first[r.URL.Path] = true
		mu.Unlock()
		if slow {
			time.Sleep(300 * time.Millisecond)
		}
		for _, c := range cases {
			if "/"+c.name != r.URL.Path {
				continue
			}
			names := c.vary
			if c.name == "auth" {
				names = []string{"Authorization"}
			}
			if c.name == "keyed" {
				names = []string{"X-Tenant"} // rendered, not declared: the edge must key it itself
			}
			w.Header().Set("Cache-Control", c.cc)
			if len(c.vary) > 0 {
				w.Header().Set("Vary", strings.Join(c.vary, ", "))
			}
			rendered := s28render(names, r.Header)
			w.Header().Set("X-Rendered", strings.ReplaceAll(rendered, "\n", "|"))
			_, _ = w.Write([]byte("page:" + rendered))
		}
	}, func(c *Config) { c.UnkeyedRequestHeaders = nil })
	edge := s7rvEdge(t, h)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			fol := map[string][]string{}
			meth := map[string]string{}
			for who, q := range c.follows {
				fol[who] = q.hdr
				meth[who] = q.method
			}
			out := s7rvCollapseAt(t, h, edge, "/"+c.name, c.leader, fol, meth)
			names := c.vary
			if c.name == "auth" {
				names = []string{"Authorization"}
			}
			if c.name == "keyed" {
				names = []string{"X-Tenant"}
			}
			for _, a := range out {
				hdr := c.leader
				if a.who != "leader" {
					hdr = c.follows[a.who].hdr
				}
				hd := http.Header{}
				for i := 0; i+1 < len(hdr); i += 2 {
					hd.Add(hdr[i], strings.TrimSpace(hdr[i+1]))
				}
				want := strings.ReplaceAll(s28render(names, hd), "\n", "|")
				if got := a.hdr.Get("X-Rendered"); got != want {
					t.Errorf("%s: %s got the answer rendered for %q, the origin would have rendered %q for it (%d, Cache-Status %q)",
						c.name, a.who, got, want, a.status, a.hdr.Get("Cache-Status"))
				}
			}
		})
	}
}
