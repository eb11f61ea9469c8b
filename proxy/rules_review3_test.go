package proxy

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"path"
	"strings"
	"testing"
)

// TestBypassRuleCoversCaseSpellingsOnCaseInsensitiveOrigins: the same
// leak as TestBypassRuleCoversEverySpellingOfItsPath, by letter case.
// Express (its router's "case sensitive routing" is off by default),
// ASP.NET Core routing and IIS (NTFS, static files and handlers) serve
// /api/me for /API/me and /Api/Me. Rules match the path case-sensitively,
// so a victim who followed a link to /API/me had their per-user API
// answer stored under the "pages" rule and served to the next user (a
// review's test; rules.Set.pick now passes such a path).
func TestBypassRuleCoversCaseSpellingsOnCaseInsensitiveOrigins(t *testing.T) {
	// As Express / ASP.NET Core / IIS route it: case-insensitively.
	apiBypassCovers(t, func(p string) string { return strings.ToLower(path.Clean("/" + p)) }, "/API/me", "/Api/me", "/aPi/me")
}

// TestKeyCookieNameWithWhitespaceIsKeyed: key.cookies: [sid] keys on the
// cookie the origin reads. Go's net/http, Node's cookie (Express
// cookie-parser), Python's http.cookies and Tomcat's RFC 6265 parser all
// trim whitespace around a cookie's name: "sid =mallory" is sid=mallory
// to them. rules.cookieValues compared the untrimmed name ("sid "), so
// the request was keyed as one without sid: Mallory's session page was
// stored under the key of every anonymous visitor (a review's test).
func TestKeyCookieNameWithWhitespaceIsKeyed(t *testing.T) {
	for name, src := range map[string]string{
		"name":    `[{name: pages, key: {cookies: [sid]}}]`,
		"pattern": `[{name: pages, key: {cookies: ["sid*"]}}]`,
	} {
		t.Run(name, func(t *testing.T) {
			p := newRuleProxy(t, ruleSite(t, src), func(w http.ResponseWriter, r *http.Request) {
				user := "anonymous"
				if c, err := r.Cookie("sid"); err == nil { // net/http: the name is trimmed
					user = c.Value
				}
				w.Header().Set("Cache-Control", "max-age=60")
				_, _ = writeString(w, "dashboard of "+user)
			}, nil)
			for i, spelling := range []string{"sid =mallory", "sid\t=mallory"} {
				target := "/dashboard/" + string(rune('a'+i))
				m := p.get(target, "Cookie", spelling)
				if !strings.Contains(m.Body.String(), "mallory") {
					t.Fatalf("%q: mallory got %q", spelling, m.Body.String())
				}
				anon := p.get(target)
				if strings.Contains(anon.Body.String(), "mallory") {
					t.Errorf("Cookie %q: an anonymous visitor got %q (Cache-Status %q): the key ignored the cookie the origin read", spelling, anon.Body.String(), anon.Header().Get("Cache-Status"))
				}
			}
		})
	}
}

// TestKeyCookieValuesCannotBeSpliced: KeyExtra wrote each cookie value
// after a '=' (now a NUL), and a cookie's value may itself hold '=':
// "a=1; b=2" (two cookies) and "a=1=b=2" (one cookie a with value "1=b=2")
// hashed the same bytes under key.cookies ["*"] (and "lang=en; lang=fr"
// and "lang=en=fr" under [lang]). The origin reads them differently, so an
// attacker's request with the spliced spelling stores its answer under
// the key of every visitor sending the two cookies (docs/rules.md: "two
// cookies of one name make a key of their own").
func TestKeyCookieValuesCannotBeSpliced(t *testing.T) {
	for name, c := range map[string]struct{ src, victim, attacker string }{
		"every":  {`[{name: pages, key: {cookies: ["*"]}}]`, "theme=dark; consent=yes", "theme=dark=consent=yes"},
		"prefix": {`[{name: pages, key: {cookies: ["pref_*"]}}]`, "pref_theme=dark; pref_consent=yes", "pref_theme=dark=pref_consent=yes"},
		"name":   {`[{name: pages, key: {cookies: [lang]}}]`, "lang=en; lang=fr", "lang=en=fr"},
	} {
		t.Run(name, func(t *testing.T) {
			p := newRuleProxy(t, ruleSite(t, c.src), func(w http.ResponseWriter, r *http.Request) {
				var b strings.Builder
				for _, ck := range r.Cookies() {
					b.WriteString("[" + ck.Name + "=" + ck.Value + "]")
				}
				w.Header().Set("Cache-Control", "max-age=60")
				_, _ = writeString(w, "page for "+b.String())
			}, nil)
			a := p.get("/home", "Cookie", c.attacker)
			v := p.get("/home", "Cookie", c.victim)
			if a.Body.String() == v.Body.String() {
				t.Errorf("Cookie %q was served the answer made for Cookie %q: %q (Cache-Status %q)", c.victim, c.attacker, v.Body.String(), v.Header().Get("Cache-Status"))
			}
		})
	}
}

// TestAllowParamsCannotBeCloakedByTheOriginsNameFolding: allow_params
// drops every parameter it does not name from the key, while the
// parameter still reaches the origin. Origins fold parameter names: PHP
// turns '.', ' ' and a lone '[' into '_' ($_GET['per_page'] for
// per.page; leading spaces are skipped: +per_page), ASP.NET Core's query collection is case-insensitive
// (Request.Query["category"] for Category). A request that spells an
// allowed parameter so was keyed as the page without it, and the origin
// answered with it: the API example's catalogue (allow_params: [page,
// per_page, category]) was stored, for everyone, as another page (a
// review's test; such a query is now keyed whole).
func TestAllowParamsCannotBeCloakedByTheOriginsNameFolding(t *testing.T) {
	php := func(raw string) map[string]string {
		out := map[string]string{}
		for _, p := range strings.Split(raw, "&") {
			k, v, _ := strings.Cut(p, "=")
			k, _ = url.QueryUnescape(k)
			k = strings.TrimLeft(k, " ") // php_register_variable_ex skips leading spaces
			k = strings.NewReplacer(".", "_", " ", "_", "[", "_").Replace(k)
			out[k] = v
		}
		return out
	}
	aspnet := func(raw string) map[string]string {
		out := map[string]string{}
		for _, p := range strings.Split(raw, "&") {
			k, v, _ := strings.Cut(p, "=")
			k, _ = url.QueryUnescape(k)
			out[strings.ToLower(k)] = v
		}
		return out
	}
	for name, c := range map[string]struct {
		read    func(string) map[string]string
		cloaked string
	}{
		"php-dot":     {php, "/v1/products?per.page=1"},
		"php-space":   {php, "/v1/products?per+page=1"},
		"aspnet-case": {aspnet, "/v1/products?Per_Page=1"},
		"php-leading": {php, "/v1/products?+per_page=1"},
	} {
		t.Run(name, func(t *testing.T) {
			site := ruleSite(t, `[{name: catalogue, match: {path: /v1/products}, default_ttl: 30s, key: {allow_params: [page, per_page, category], sort_params: true}}]`)
			p := newRuleProxy(t, site, func(w http.ResponseWriter, r *http.Request) {
				q := c.read(r.URL.RawQuery)
				_, _ = writeString(w, "products per_page="+q["per_page"]+" category="+q["category"])
			}, nil)
			p.get(c.cloaked)
			if w := p.get("/v1/products"); w.Body.String() != "products per_page= category=" {
				t.Errorf("GET /v1/products got %q (Cache-Status %q) after %s: a parameter the key dropped reached the origin as an allowed one", w.Body.String(), w.Header().Get("Cache-Status"), c.cloaked)
			}
		})
	}
}

// TestHeadRuleFillIsNotServedToAGetUnderASetRule: uniformEdits leaves the
// key rule's set field out of a GET's variant key because "every request
// sharing the key is sent it". A HEAD is not when a rule for HEAD alone
// comes first: ForRequest(HEAD) gives that rule, which does not set the
// field, while HEAD and GET share one entry. Anyone's HEAD filled the
// entry the origin made without the shared secret, and every GET was
// served it (a review's test; uniformEdits now asks HEAD's rule too).
func TestHeadRuleFillIsNotServedToAGetUnderASetRule(t *testing.T) {
	site := ruleSite(t, `
- {name: probes, match: {methods: [HEAD]}, default_ttl: 5m}
- {name: pages, default_ttl: 5m, request_headers: {set: {X-Origin-Token: s3cret}}}
`)
	p := newRuleProxy(t, site, func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Origin-Token") != "s3cret" {
			_, _ = writeString(w, "direct access: use the CDN")
			return
		}
		_, _ = writeString(w, "the page")
	}, nil)
	r := httptest.NewRequest("HEAD", "http://shop.test/page", nil)
	p.h.ServeInbound(httptest.NewRecorder(), r, Inbound{Site: p.site})
	p.h.Wait()
	if g := p.get("/page"); g.Body.String() != "the page" {
		t.Errorf("GET /page after a HEAD got %q (Cache-Status %q): the answer the origin made for a request without the rule's X-Origin-Token", g.Body.String(), g.Header().Get("Cache-Status"))
	}
}
