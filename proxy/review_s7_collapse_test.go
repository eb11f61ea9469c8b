package proxy

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// s7rvFills is how many fills are registered in h's coalescer.
func s7rvFills(h *Handler) int {
	h.co.mu.Lock()
	defer h.co.mu.Unlock()
	return len(h.co.fills)
}

type s7rvAnswer struct {
	who    string
	status int
	hdr    http.Header
	body   string
}

// s7rvCollapse sends leader through a real HTTP server in front of h, waits
// until its fill is registered, then sends the followers concurrently,
// and returns every answer (leader first).
func s7rvCollapse(t *testing.T, h *Handler, path string, leader []string, followers map[string][]string, method map[string]string) []s7rvAnswer {
	t.Helper()
	return s7rvCollapseAt(t, h, s7rvEdge(t, h), path, leader, followers, method)
}

var s7rvEdgeOf sync.Map // *Handler -> *httptest.Server

// s7rvEdge is the one real HTTP server in front of h.
func s7rvEdge(t *testing.T, h *Handler) *httptest.Server {
	if v, ok := s7rvEdgeOf.Load(h); ok {
		return v.(*httptest.Server)
	}
	edge := httptest.NewServer(h)
	t.Cleanup(edge.Close)
	s7rvEdgeOf.Store(h, edge)
	return edge
}

// s7rvDo sends one real request to the edge.
func s7rvDo(edge *httptest.Server, who, m, path string, hdr []string) s7rvAnswer {
	c := &http.Client{Transport: &http.Transport{DisableCompression: true}}
	req, _ := http.NewRequest(m, edge.URL+path, nil)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Add(hdr[i], hdr[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		return s7rvAnswer{who: who, body: "error: " + err.Error()}
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return s7rvAnswer{who: who, status: resp.StatusCode, hdr: resp.Header, body: string(b)}
}

func s7rvCollapseAt(t *testing.T, h *Handler, edge *httptest.Server, path string, leader []string, followers map[string][]string, method map[string]string) []s7rvAnswer {
	t.Helper()
	c := &http.Client{Transport: &http.Transport{DisableCompression: true}}
	do := func(who string, hdr []string) s7rvAnswer {
		m := "GET"
		if method[who] != "" {
			m = method[who]
		}
		req, _ := http.NewRequest(m, edge.URL+path, nil)
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Add(hdr[i], hdr[i+1])
		}
		resp, err := c.Do(req)
		if err != nil {
			return s7rvAnswer{who: who, body: "error: " + err.Error()}
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return s7rvAnswer{who: who, status: resp.StatusCode, hdr: resp.Header, body: string(b)}
	}
	var mu sync.Mutex
	var out []s7rvAnswer
	var wg sync.WaitGroup
	wg.Go(func() {
		a := do("leader", leader)
		mu.Lock()
		out = append([]s7rvAnswer{a}, out...)
		mu.Unlock()
	})
	waitUntil(t, "leader's fill registered", func() bool { return s7rvFills(h) > 0 })
	for who, hdr := range followers {
		wg.Go(func() {
			a := do(who, hdr)
			mu.Lock()
			out = append(out, a)
			mu.Unlock()
		})
	}
	wg.Wait()
	h.Wait()
	for _, a := range out {
		t.Logf("%-10s %d %q Set-Cookie=%q Cache-Status=%q", a.who, a.status, a.body, a.hdr.Values("Set-Cookie"), a.hdr.Get("Cache-Status"))
	}
	return out
}

// TestS7CollapsedFollowersNeverGetTheLeadersOwnAnswer: a leader with a
// Cookie (or the answer it gets) must not reach followers without one
// when the answer is personal by RFC 9111's rules: Set-Cookie (not
// stored by default), Vary: Cookie, private, no-store, a heuristic
// freshness for a request with a Cookie, or no freshness at all. Each
// case: the origin is slow, the leader's fill is registered, then
// anonymous followers come. Held on the current code.
func TestS7CollapsedFollowersNeverGetTheLeadersOwnAnswer(t *testing.T) {
	cases := map[string]func(w http.ResponseWriter){
		"set-cookie": func(w http.ResponseWriter) {
			w.Header().Set("Cache-Control", "max-age=60")
			w.Header().Set("Set-Cookie", "seen=1")
		},
		"vary-cookie": func(w http.ResponseWriter) {
			w.Header().Set("Cache-Control", "max-age=60")
			w.Header().Set("Vary", "Cookie")
		},
		"private":  func(w http.ResponseWriter) { w.Header().Set("Cache-Control", "private, max-age=60") },
		"no-store": func(w http.ResponseWriter) { w.Header().Set("Cache-Control", "no-store") },
		"heuristic": func(w http.ResponseWriter) {
			w.Header().Set("Last-Modified", time.Now().Add(-time.Hour).UTC().Format(http.TimeFormat))
		},
		"nothing": func(w http.ResponseWriter) {},
		"401-private": func(w http.ResponseWriter) {
			w.Header().Set("Cache-Control", "private, max-age=60")
			w.Header().Set("WWW-Authenticate", "Bearer")
		},
	}
	for name, shape := range cases {
		t.Run(name, func(t *testing.T) {
			var first atomic.Bool
			h, _ := handlerProxy(t, func(w http.ResponseWriter, r *http.Request) {
				if !first.Swap(true) {
					time.Sleep(400 * time.Millisecond)
				}
				shape(w)
				who := r.Header.Get("Cookie")
				if who == "" {
					who = "anonymous"
				}
				if name == "401-private" && who != "anonymous" {
					w.WriteHeader(http.StatusUnauthorized)
				}
				_, _ = io.WriteString(w, "page for "+who)
			}, nil)
			out := s7rvCollapse(t, h, "/acct", []string{"Cookie", "sid=LEADER"},
				map[string][]string{"anon1": nil, "anon2": nil, "head": nil, "range": {"Range", "bytes=0-3"}},
				map[string]string{"head": "HEAD"})
			for _, a := range out[1:] {
				if strings.Contains(a.body, "LEADER") || strings.Contains(strings.Join(a.hdr.Values("Set-Cookie"), ";"), "LEADER") || a.status == http.StatusUnauthorized {
					t.Errorf("%s: follower %s got the leader's answer: %d %q Set-Cookie %q (Cache-Status %q)",
						name, a.who, a.status, a.body, a.hdr.Values("Set-Cookie"), a.hdr.Get("Cache-Status"))
				}
			}
		})
	}
}

// TestS7CollapsedAuthorizationLeaderAnswerStaysHis: a leader with
// Authorization never shares its fetch; followers without it arriving
// meanwhile fetch for themselves, whatever it got (401, a personal 200
// without public). Held.
func TestS7CollapsedAuthorizationLeaderAnswerStaysHis(t *testing.T) {
	var first atomic.Bool
	h, calls := handlerProxy(t, func(w http.ResponseWriter, r *http.Request) {
		if !first.Swap(true) {
			time.Sleep(400 * time.Millisecond)
		}
		w.Header().Set("Cache-Control", "max-age=60")
		if a := r.Header.Get("Authorization"); a != "" {
			_, _ = io.WriteString(w, "secret of "+a)
			return
		}
		_, _ = io.WriteString(w, "public page")
	}, nil)
	edge := s7rvEdge(t, h)
	var wg sync.WaitGroup
	var out []s7rvAnswer
	var mu sync.Mutex
	for i, who := range []string{"alice", "anon1", "anon2"} {
		hdr := []string(nil)
		if who == "alice" {
			hdr = []string{"Authorization", "Bearer ALICE"}
		}
		wg.Go(func() {
			a := s7rvDo(edge, who, "GET", "/me", hdr)
			mu.Lock()
			out = append(out, a)
			mu.Unlock()
		})
		if i == 0 {
			time.Sleep(100 * time.Millisecond)
		}
	}
	wg.Wait()
	for _, a := range out {
		t.Logf("%s: %q %q", a.who, a.body, a.hdr.Get("Cache-Status"))
		if a.who == "alice" {
			continue
		}
		if strings.Contains(a.body, "ALICE") {
			t.Errorf("follower %s got %q", a.who, a.body)
		}
	}
	t.Logf("origin calls %d", calls.Load())
}

// TestS7Collapsed304WithSetCookieAndPrivate: a stale entry is
// revalidated by a leader with a Cookie; the 304 carries Set-Cookie for
// the leader, or says private, or adds Vary: Cookie, each with a field
// naming the user. Followers arriving during the revalidation, and later
// users, must get none of it. private, Vary: Cookie and no-store hold;
// set-cookie FAILS: the 304's other fields are merged and shared (same
// bug as TestS7A304ThatSetsACookieIsNotMergedForEveryone, through
// collapsing).
func TestS7Collapsed304WithSetCookieAndPrivate(t *testing.T) {
	for _, shape := range []string{"set-cookie", "private", "vary-cookie", "no-store"} {
		t.Run(shape, func(t *testing.T) {
			clk := &clock{now: t0}
			var n atomic.Int32
			h, _ := handlerProxy(t, func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Date", clk.Now().Format(http.TimeFormat))
				w.Header().Set("ETag", `"e"`)
				if r.Header.Get("If-None-Match") == `"e"` {
					if n.Add(1) == 1 {
						time.Sleep(400 * time.Millisecond)
					}
					if c := r.Header.Get("Cookie"); c != "" {
						switch shape {
						case "set-cookie":
							w.Header().Set("Set-Cookie", "sid="+strings.TrimPrefix(c, "sid="))
							w.Header().Set("X-Debug-User", c)
						case "private":
							w.Header().Set("Cache-Control", "private, max-age=600")
							w.Header().Set("X-Debug-User", c)
						case "vary-cookie":
							w.Header().Set("Vary", "Cookie")
							w.Header().Set("X-Debug-User", c)
						case "no-store":
							w.Header().Set("Cache-Control", "no-store")
							w.Header().Set("X-Debug-User", c)
						}
					}
					w.WriteHeader(http.StatusNotModified)
					return
				}
				w.Header().Set("Cache-Control", "max-age=1")
				_, _ = io.WriteString(w, "shared page")
			}, func(c *Config) { c.Now = clk.Now; c.UnkeyedRequestHeaders = nil })
			edge := s7rvEdge(t, h)
			s7rvDo(edge, "prime", "GET", "/p", nil)
			clk.Set(t0.Add(10 * time.Second))
			out := s7rvCollapseAt(t, h, edge, "/p", []string{"Cookie", "sid=LEADER"}, map[string][]string{"f1": nil, "f2": nil}, nil)
			after := s7rvDo(edge, "after", "GET", "/p", nil)
			out = append(out, after)
			t.Logf("after: %q %v", after.hdr.Get("Cache-Status"), after.hdr)
			for _, a := range out[1:] {
				if strings.Contains(fmt.Sprint(a.hdr), "LEADER") {
					t.Errorf("%s: %s (no cookie) got X-Debug-User=%q, a field of the 304 answering the leader's Cookie request (Cache-Status %q): "+
						"with shape %s the 304's fields were merged into the entry handed to followers and stored for everyone", shape, a.who, a.hdr.Get("X-Debug-User"), a.hdr.Get("Cache-Status"), shape)
				}
			}
		})
	}
}
