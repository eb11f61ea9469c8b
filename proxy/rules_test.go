package proxy

import (
	"bytes"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.yaml.in/yaml/v3"

	"github.com/edgecache/edge/rules"
)

// ruleSite compiles rules written as config.yaml writes them into a site.
func ruleSite(t testing.TB, src string) *Site {
	t.Helper()
	var v any
	if err := yaml.Unmarshal([]byte(src), &v); err != nil {
		t.Fatal(err)
	}
	set, err := rules.Parse("rules", v)
	if err != nil {
		t.Fatal(err)
	}
	s := NewSite("shop", false, nil)
	s.Rules = set
	return s
}

// ruleProxy is a handler with a settable clock in front of fn, serving
// requests of site.
type ruleProxy struct {
	h     *Handler
	clk   *clock
	site  *Site
	calls *atomic.Int64
	last  atomic.Pointer[http.Request] // the last request the origin saw
}

func newRuleProxy(t *testing.T, site *Site, fn http.HandlerFunc, mod func(*Config)) *ruleProxy {
	t.Helper()
	p := &ruleProxy{clk: &clock{now: t0}, site: site}
	p.h, p.calls = handlerProxy(t, func(w http.ResponseWriter, r *http.Request) {
		p.last.Store(r)
		w.Header().Set("Date", p.clk.Now().Format(http.TimeFormat))
		fn(w, r)
	}, func(c *Config) {
		c.Now = p.clk.Now
		if mod != nil {
			mod(c)
		}
	})
	return p
}

func (p *ruleProxy) get(path string, hdr ...string) *httptest.ResponseRecorder {
	r := httptest.NewRequest("GET", "http://shop.test"+path, nil)
	for i := 0; i+1 < len(hdr); i += 2 {
		r.Header.Add(hdr[i], hdr[i+1])
	}
	w := httptest.NewRecorder()
	p.h.ServeInbound(w, r, Inbound{Site: p.site})
	p.h.Wait()
	return w
}

func (p *ruleProxy) advance(d time.Duration) { p.clk.Set(p.clk.Now().Add(d)) }

// plainPage is an origin page without caching headers (Python's
// http.server, a PHP script).
func plainPage(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/html")
	_, _ = fmt.Fprintf(w, "page %s", r.URL.Path)
}

func TestRuleDefaultTTLCachesPagesWithoutHeaders(t *testing.T) {
	p := newRuleProxy(t, ruleSite(t, `[{name: pages, default_ttl: 1h}]`), plainPage, nil)
	p.get("/")
	if w := p.get("/"); !strings.Contains(w.Header().Get("Cache-Status"), "hit") || p.calls.Load() != 1 {
		t.Fatalf("second request: %q, %d origin calls", w.Header().Get("Cache-Status"), p.calls.Load())
	}
	p.advance(59 * time.Minute)
	if p.get("/"); p.calls.Load() != 1 {
		t.Fatal("refetched within the default TTL")
	}
	p.advance(2 * time.Minute)
	if p.get("/"); p.calls.Load() != 2 {
		t.Fatal("not refetched after the default TTL")
	}
}

func TestRuleLifetimeBounds(t *testing.T) {
	site := ruleSite(t, `
- {name: e404, match: {status: [404]}, ttl: 30s}
- {name: floor, match: {path: /floor}, min_ttl: 10m}
- {name: ceiling, match: {path: /ceiling}, max_ttl: 1m}
- {name: over, match: {path: /over}, ttl: 5m}
`)
	p := newRuleProxy(t, site, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/missing":
			w.WriteHeader(http.StatusNotFound)
		case "/ceiling":
			w.Header().Set("Cache-Control", "max-age=86400")
		case "/over":
			w.Header().Set("Cache-Control", "max-age=0")
		default:
			w.Header().Set("Cache-Control", "max-age=5")
		}
		_, _ = writeString(w, "x")
	}, nil)
	for _, tc := range []struct {
		path     string
		fresh    time.Duration // still a hit after this
		stale    time.Duration // refetched after this (from the start)
		wantCode int
	}{
		{"/missing", 25 * time.Second, 31 * time.Second, 404},
		{"/floor", 9 * time.Minute, 11 * time.Minute, 200},
		{"/ceiling", 50 * time.Second, 61 * time.Second, 200},
		{"/over", 4 * time.Minute, 6 * time.Minute, 200},
	} {
		p.clk.Set(t0)
		before := p.calls.Load()
		if w := p.get(tc.path); w.Code != tc.wantCode {
			t.Fatalf("%s: %d", tc.path, w.Code)
		}
		p.advance(tc.fresh)
		if p.get(tc.path); p.calls.Load() != before+1 {
			t.Errorf("%s: refetched after %v", tc.path, tc.fresh)
		}
		p.clk.Set(t0.Add(tc.stale))
		if p.get(tc.path); p.calls.Load() != before+2 {
			t.Errorf("%s: not refetched after %v", tc.path, tc.stale)
		}
	}
}

// writeString keeps the test origin's writes short.
func writeString(w http.ResponseWriter, s string) (int, error) { return w.Write([]byte(s)) }

func TestClientNoCacheModes(t *testing.T) {
	for _, tc := range []struct {
		mode      string
		wantCalls int64 // origin requests for 1 fill + 8 hard reloads 1 s apart
	}{
		{"honour", 9},
		{"ignore", 1},
		{"coalesce", 3}, // one revalidation per 4 s: at 4 s and at 8 s
	} {
		t.Run(tc.mode, func(t *testing.T) {
			src := fmt.Sprintf(`[{name: r, client_no_cache: %s}]`, tc.mode)
			if tc.mode == "coalesce" {
				src = `[{name: r, client_no_cache: coalesce, revalidate_interval: 4s}]`
			}
			p := newRuleProxy(t, ruleSite(t, src), func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Cache-Control", "max-age=3600")
				w.Header().Set("ETag", `"v1"`)
				if r.Header.Get("If-None-Match") == `"v1"` {
					w.WriteHeader(http.StatusNotModified)
					return
				}
				_, _ = writeString(w, "body")
			}, nil)
			p.get("/a")
			for i := range 8 {
				p.advance(time.Second)
				hdr := []string{"Cache-Control", "no-cache"}
				if i%2 == 1 {
					hdr = []string{"Pragma", "no-cache"}
				}
				if w := p.get("/a", hdr...); w.Code != 200 || w.Body.String() != "body" {
					t.Fatalf("reload %d: %d %q", i, w.Code, w.Body.String())
				}
			}
			if got := p.calls.Load(); got != tc.wantCalls {
				t.Fatalf("%s: %d origin requests, want %d", tc.mode, got, tc.wantCalls)
			}
		})
	}
}

func TestClientNoCachePolicyDefaultAndRuleOverride(t *testing.T) {
	site := ruleSite(t, `[{name: api, match: {path: /api/}, client_no_cache: honour}, {name: rest}]`)
	p := newRuleProxy(t, site, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=3600")
		_, _ = writeString(w, "x")
	}, func(c *Config) { c.Policy.ClientNoCache = rules.Ignore })
	p.get("/page")
	p.get("/api/x")
	p.advance(time.Second) // max-age=0 asks for a response younger than 1 s
	p.get("/page", "Cache-Control", "max-age=0")
	if p.calls.Load() != 2 {
		t.Fatal("the policy's ignore was not applied")
	}
	p.get("/api/x", "Cache-Control", "max-age=0")
	if p.calls.Load() != 3 {
		t.Fatal("the rule's honour was not applied")
	}
}

func TestRuleBypassAndKeyShaping(t *testing.T) {
	site := ruleSite(t, `
- {name: admin, match: {path: /admin/}, bypass: true}
- {name: utm, match: {path: /blog/}, key: {ignore_params: [utm_*, fbclid], sort_params: true}}
- {name: lang, match: {path: /i18n/}, key: {cookies: [lang]}}
- {name: rest, default_ttl: 1h}
`)
	p := newRuleProxy(t, site, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=3600")
		lang := "none"
		if c, err := r.Cookie("lang"); err == nil {
			lang = c.Value
		}
		_, _ = fmt.Fprintf(w, "%s %s", r.URL.RawQuery, lang)
	}, nil)
	p.get("/admin/x")
	p.get("/admin/x")
	if p.calls.Load() != 2 {
		t.Fatalf("bypass: %d origin calls", p.calls.Load())
	}
	p.get("/blog/post?utm_source=a&b=2&a=1")
	w := p.get("/blog/post?a=1&fbclid=x&b=2&utm_medium=z")
	if p.calls.Load() != 3 || !strings.Contains(w.Header().Get("Cache-Status"), "hit") {
		t.Fatalf("ignored parameters split the cache: %d calls, %q", p.calls.Load(), w.Header().Get("Cache-Status"))
	}
	if q := p.last.Load().URL.RawQuery; q != "a=1&b=2&utm_source=a" {
		t.Fatalf("the origin must get the query sorted as the key has it, ignored parameters included: %q", q)
	}
	en := p.get("/i18n/home", "Cookie", "lang=en; sid=1")
	de := p.get("/i18n/home", "Cookie", "lang=de; sid=2")
	en2 := p.get("/i18n/home", "Cookie", "sid=3; lang=en")
	if !strings.HasSuffix(en.Body.String(), "en") || !strings.HasSuffix(de.Body.String(), "de") || en2.Body.String() != en.Body.String() {
		t.Fatalf("cookie key: en %q de %q en2 %q", en.Body.String(), de.Body.String(), en2.Body.String())
	}
}

func TestStripCookiesStoresWhatSetCookieKeptOut(t *testing.T) {
	site := ruleSite(t, `[{name: static, match: {path: /static/}, strip_cookies: true}]`)
	p := newRuleProxy(t, site, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=3600")
		w.Header().Set("Set-Cookie", "tracker="+r.Header.Get("Cookie"))
		_, _ = writeString(w, "css")
	}, nil)
	a := p.get("/static/a.css", "Cookie", "sid=alice")
	b := p.get("/static/a.css", "Cookie", "sid=bob")
	if p.calls.Load() != 1 || !strings.Contains(b.Header().Get("Cache-Status"), "hit") {
		t.Fatalf("not cached: %d calls", p.calls.Load())
	}
	if p.last.Load().Header.Get("Cookie") != "" {
		t.Fatal("the origin saw a cookie on a path that strips them")
	}
	for _, w := range []*httptest.ResponseRecorder{a, b} {
		if sc := w.Header().Values("Set-Cookie"); len(sc) > 0 {
			t.Fatalf("Set-Cookie reached a client: %v", sc)
		}
	}
}

func TestRuleHeaderEdits(t *testing.T) {
	site := ruleSite(t, `[{name: h, request_headers: {set: {X-Edge-Site: shop}, remove: [X-Debug]}, response_headers: {set: {X-Frame-Options: DENY}, remove: [Server]}}]`)
	p := newRuleProxy(t, site, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=60")
		w.Header().Set("Server", "origin/1.0")
		_, _ = writeString(w, "x")
	}, nil)
	for range 2 { // the miss and the hit
		w := p.get("/", "X-Debug", "1")
		if w.Header().Get("Server") != "" || w.Header().Get("X-Frame-Options") != "DENY" {
			t.Fatalf("response edits: %v", w.Header())
		}
	}
	if h := p.last.Load().Header; h.Get("X-Edge-Site") != "shop" || h.Get("X-Debug") != "" {
		t.Fatalf("request edits: %v", h)
	}
}

// TestNoRuleSharesWhatRFC9111KeepsPrivate tries every rule that lengthens
// or forces a lifetime, ignores client directives or shapes the key,
// against every kind of personal answer an origin gives: a second user
// must never get the first user's answer.
func TestNoRuleSharesWhatRFC9111KeepsPrivate(t *testing.T) {
	ruleSets := map[string]string{
		"default_ttl":       `[{name: r, default_ttl: 1h}]`,
		"ttl":               `[{name: r, ttl: 1h}]`,
		"min_ttl":           `[{name: r, min_ttl: 1h}]`,
		"swr+sie":           `[{name: r, default_ttl: 1m, stale_while_revalidate: 1h, stale_if_error: 1h}]`,
		"ignore_no_cache":   `[{name: r, default_ttl: 1h, client_no_cache: ignore}]`,
		"coalesce":          `[{name: r, default_ttl: 1h, client_no_cache: coalesce, revalidate_interval: 1h}]`,
		"key_ignore_all":    `[{name: r, ttl: 1h, key: {allow_params: [page]}}]`,
		"status_rule":       `[{name: s, match: {status: [200, 302, 404, 500]}, ttl: 1h}, {name: r, default_ttl: 1h}]`,
		"response_headers":  `[{name: r, ttl: 1h, response_headers: {set: {X-Cacheable: "yes"}}}]`,
		"regex+methods":     `[{name: r, match: {path_regex: "^/", methods: [GET]}, ttl: 1h}]`,
		"strip_elsewhere":   `[{name: s, match: {path: /static/}, strip_cookies: true}, {name: r, ttl: 1h}]`,
		"cookie_cond_ttl":   `[{name: c, match: {cookie: sid}, ttl: 1h}, {name: r, ttl: 1h}]`,
		"device_key_ttl":    `[{name: r, ttl: 1h, key: {device: true}}]`,
		"header_request_rm": `[{name: r, ttl: 1h, request_headers: {remove: [X-Trace]}}]`,
	}
	// Each origin answer is personal: it echoes the user, and says (or
	// implies) that it must not be shared.
	answers := map[string]func(w http.ResponseWriter, user string){
		"private":    func(w http.ResponseWriter, u string) { w.Header().Set("Cache-Control", "private, max-age=600") },
		"no-store":   func(w http.ResponseWriter, u string) { w.Header().Set("Cache-Control", "no-store") },
		"set-cookie": func(w http.ResponseWriter, u string) { w.Header().Set("Set-Cookie", "sid="+u) },
		"set-cookie2": func(w http.ResponseWriter, u string) {
			w.Header().Add("Set-Cookie", "sid="+u)
			w.Header().Set("Cache-Control", "max-age=600")
		},
		"no headers": func(w http.ResponseWriter, u string) {}, // personal by the Cookie or Authorization it answered
		"auth max-age": func(w http.ResponseWriter, u string) {
			w.Header().Set("Cache-Control", "max-age=600") // not public: not for others when the request had credentials
		},
	}
	personal := [][]string{
		{"Cookie", "sid=USER"},
		{"Authorization", "Bearer USER"},
	}
	for rname, src := range ruleSets {
		for aname, answer := range answers {
			for _, via := range personal {
				if aname == "auth max-age" && via[0] == "Cookie" {
					// An explicit max-age without private is the origin's
					// word that the answer to a cookie is for everyone
					// (RFC 9111 §3); only credentials need public.
					continue
				}
				name := rname + "/" + aname + "/" + via[0]
				t.Run(name, func(t *testing.T) {
					site := ruleSite(t, src)
					p := newRuleProxy(t, site, func(w http.ResponseWriter, r *http.Request) {
						user := strings.TrimPrefix(strings.TrimPrefix(r.Header.Get(via[0]), "sid="), "Bearer ")
						answer(w, user)
						_, _ = writeString(w, "secret of "+user)
					}, nil)
					for _, path := range []string{"/p?page=1", "/static/x"} {
						alice := p.get(path, via[0], strings.Replace(via[1], "USER", "alice", 1))
						bob := p.get(path, via[0], strings.Replace(via[1], "USER", "bob", 1), "Cache-Control", "no-cache")
						anon := p.get(path)
						for who, w := range map[string]*httptest.ResponseRecorder{"bob": bob, "anonymous": anon} {
							if strings.Contains(w.Body.String(), "alice") || strings.Contains(strings.Join(w.Header().Values("Set-Cookie"), ";"), "alice") {
								t.Fatalf("%s %s got alice's answer (%q, %v); alice got %q", path, who, w.Body.String(), w.Header(), alice.Header().Get("Cache-Status"))
							}
						}
					}
				})
			}
		}
	}
}

func TestHitPathFollowsRules(t *testing.T) {
	site := ruleSite(t, `
- {name: admin, match: {path: /admin/}, bypass: true}
- {name: dev, match: {path: /dev/}, key: {device: true}}
- {name: utm, key: {ignore_params: [utm_*]}, default_ttl: 1h}
`)
	p := newRuleProxy(t, site, plainPage, nil)
	for _, path := range []string{"/admin/a", "/dev/a", "/a?utm_source=x"} {
		p.get(path)
	}
	appendHit := func(path, query string) bool {
		var a HitAnswer
		ok := p.h.AppendHit(nil, &HitRequest{Host: "shop.test", Path: path, RawQuery: query, Site: site}, []byte("Date: x\r\n"), &a)
		if ok {
			p.h.ReleaseHit(a.Pinned, a.ClientIP)
		}
		return ok
	}
	if appendHit("/admin/a", "") {
		t.Error("the hit path answered a bypassed path")
	}
	if appendHit("/dev/a", "") {
		t.Error("the hit path answered a path keyed on the device, which it does not read")
	}
	if !appendHit("/a", "utm_source=other") {
		t.Error("the hit path missed an entry whose key ignores the parameter")
	}
	withCookieRule := ruleSite(t, `[{name: in, match: {cookie: sid}, bypass: true}, {name: r, default_ttl: 1h}]`)
	var a HitAnswer
	if p.h.AppendHit(nil, &HitRequest{Host: "shop.test", Path: "/a", Site: withCookieRule}, []byte("Date: x\r\n"), &a) {
		t.Error("the hit path answered for a site whose rules read cookies")
	}
}

// TestRangedFirstRequestToOriginWithoutRanges: an origin that ignores
// Range (Python's http.server) answers the first ranged request whole:
// that is one origin fetch, the object is stored, and ranges are served
// from it.
func TestRangedFirstRequestToOriginWithoutRanges(t *testing.T) {
	body := bytes.Repeat([]byte("0123456789abcdef"), 5<<20/16) // 5 MiB
	var whole atomic.Int64
	h, calls := handlerProxy(t, func(w http.ResponseWriter, r *http.Request) {
		whole.Add(1)
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("Last-Modified", "Mon, 01 Jan 2024 00:00:00 GMT")
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		_, _ = w.Write(body)
	}, func(c *Config) { c.SliceBytes = 1 << 20; c.MaxObjectBytes = 8 << 20; c.MaxBufferedBytes = 64 << 20 })
	w := serve(h, "GET", "/big.bin", "Range", "bytes=3000000-3000099")
	if w.Code != http.StatusPartialContent || !bytes.Equal(w.Body.Bytes(), body[3000000:3000100]) {
		t.Fatalf("first ranged request: %d, %d bytes", w.Code, w.Body.Len())
	}
	if calls.Load() != 1 {
		t.Fatalf("%d origin fetches, want 1", calls.Load())
	}
	for _, rg := range []string{"bytes=0-9", "bytes=-5", "bytes=4000000-"} {
		w := serve(h, "GET", "/big.bin", "Range", rg)
		if w.Code != http.StatusPartialContent || !strings.Contains(w.Header().Get("Cache-Status"), "hit") {
			t.Fatalf("%s: %d %q", rg, w.Code, w.Header().Get("Cache-Status"))
		}
	}
	if w := serve(h, "GET", "/big.bin"); w.Code != 200 || !bytes.Equal(w.Body.Bytes(), body) {
		t.Fatalf("whole: %d", w.Code)
	}
	if calls.Load() != 1 {
		t.Fatalf("%d origin fetches after the ranges, want 1", calls.Load())
	}
}

func TestRuleCountsPerRule(t *testing.T) {
	p := newRuleProxy(t, ruleSite(t, `[{name: pages, default_ttl: 1h}]`), plainPage, nil)
	p.get("/")
	p.get("/")
	if got := testutil.ToFloat64(p.h.metrics.rules.requests.WithLabelValues("shop", "pages", ResultHit)); got != 1 {
		t.Fatalf("hits of rule pages: %v", got)
	}
	if got := testutil.ToFloat64(p.h.metrics.rules.requests.WithLabelValues("shop", "pages", ResultMiss)); got != 1 {
		t.Fatalf("misses of rule pages: %v", got)
	}
	if got := testutil.ToFloat64(p.h.metrics.rules.origin.WithLabelValues("shop", "pages")); got != 1 {
		t.Fatalf("origin requests of rule pages: %v", got)
	}
}

// BenchmarkAppendHitRules50 is BenchmarkAppendHit for a site with the 50
// rules of rules/testdata/worst50.yaml, the last one matching (the worst
// case of matching).
func BenchmarkAppendHitRules50(b *testing.B) {
	data, err := os.ReadFile("../rules/testdata/worst50.yaml")
	if err != nil {
		b.Fatal(err)
	}
	var doc struct {
		Rules any `yaml:"rules"`
	}
	if err := yaml.Unmarshal(data, &doc); err != nil {
		b.Fatal(err)
	}
	list, _ := yaml.Marshal(doc.Rules)
	site := ruleSite(b, string(list))
	p := newTestProxy(b, nil)
	p.origin.set(originResp{header: map[string]string{"Cache-Control": "max-age=3600", "Content-Type": "application/octet-stream"}, body: strings.Repeat("x", 4096)})
	r := httptest.NewRequest("GET", "http://example.com/size/4096", nil)
	p.h.ServeInbound(httptest.NewRecorder(), r, Inbound{Site: site})
	p.h.Wait()
	benchAppendHit(b, p, &HitRequest{Host: "example.com", Path: "/size/4096", Site: site})
}
