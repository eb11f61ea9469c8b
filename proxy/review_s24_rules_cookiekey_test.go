package proxy

import (
	"net/http"
	"strings"
	"testing"
)

// A review found (now mended): key.cookies keys on a cookie by its exact name (rules.cookieValues:
// n == pattern after trimming), while origins read cookie names folded.
// ASP.NET Core's Request.Cookies is a dictionary with
// StringComparer.OrdinalIgnoreCase (RequestCookieCollection, first value
// wins), and PHP's $_COOKIE turns '.' and ' ' in a name into '_' (as it does
// for query names, which rules.foldParamName already reads that way for
// allow_params/ignore_params). A request that spells the keyed cookie so
// (Cookie: LANG=de, or site.lang=de) is keyed as a request without it (or
// with the victim's value, when it also carries lang=en), and the origin
// answers in the spelled value: the answer (explicit max-age, so storable
// from a cookie request) is stored under the key of every visitor without
// the cookie, or of every lang=en visitor. One request poisons the page for
// everyone. Fix: in KeyExtra, key every cookie whose name folds
// (foldParamName-like: case, '.', ' ', '[') to a keyed name; or, as
// KeyQuery does for parameters, give a request whose Cookie holds a name
// that folds to a keyed one and is not spelled as it a key of its own
// (hash the whole Cookie field).
func TestS24KeyCookieNameAsTheOriginReadsIt(t *testing.T) {
	// aspnet reads the first cookie whose name equals name in any case.
	aspnet := func(r *http.Request, name string) string {
		for _, c := range r.Cookies() {
			if strings.EqualFold(c.Name, name) {
				return c.Value
			}
		}
		return ""
	}
	// php reads the first cookie whose name, '.' and ' ' read as '_', is name.
	php := func(r *http.Request, name string) string {
		for _, c := range r.Cookies() {
			if strings.NewReplacer(".", "_", " ", "_").Replace(c.Name) == name {
				return c.Value
			}
		}
		return ""
	}
	for _, c := range []struct {
		name, cookie     string
		read             func(*http.Request, string) string
		attacker, victim string // the victim's Cookie ("" none)
	}{
		{"aspnet-case/no-cookie-visitor", "lang", aspnet, "LANG=de", ""},
		{"aspnet-case/lang=en-visitor", "lang", aspnet, "LANG=de; lang=en", "lang=en"},
		{"php-dot/no-cookie-visitor", "site_lang", php, "site.lang=de", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			site := ruleSite(t, `[{name: i18n, key: {cookies: [`+c.cookie+`]}}]`)
			p := newRuleProxy(t, site, func(w http.ResponseWriter, r *http.Request) {
				lang := c.read(r, c.cookie)
				if lang == "" {
					lang = "en"
				}
				// The origin says the page may be shared for an hour: the
				// operator keys it on the language cookie.
				w.Header().Set("Cache-Control", "max-age=3600")
				_, _ = writeString(w, "home page in "+lang)
			}, nil)
			a := p.get("/", "Cookie", c.attacker)
			if !strings.Contains(a.Body.String(), "in de") {
				t.Fatalf("the origin did not read %q as %s=de: %q", c.attacker, c.cookie, a.Body.String())
			}
			var v = p.get("/")
			if c.victim != "" {
				v = p.get("/", "Cookie", c.victim)
			}
			if strings.Contains(v.Body.String(), "in de") {
				t.Errorf("visitor with Cookie %q got %q (Cache-Status %q): stored from the request with Cookie %q, which key.cookies [%s] did not key on",
					c.victim, v.Body.String(), v.Header().Get("Cache-Status"), c.attacker, c.cookie)
			}
		})
	}
}

// A review found (now mended): a cookie condition (match: {cookie: NAME}) is compared with the
// exact cookie name (rules.Rule.matchCookie: nameMatch on the trimmed name),
// while ASP.NET Core reads cookie names in any case and PHP reads '.' and ' '
// in them as '_'. A logged-in attacker who spells his session cookie so
// (Cookie: AUTH_TOKEN=…, or auth.token=…) is not bypassed by the operator's
// "logged-in users pass" rule, the origin still reads his session, and its
// page (here with the explicit max-age the origin gives every page, which
// the bypass exists to override for logged-in users) is stored under the
// page's key and served to every anonymous visitor. Fix: match cookie
// conditions against every reading of the name (case-folded, '.', ' ', '['
// read as '_'), as KeyQuery reads parameter names; a request whose cookie
// names fold to a condition's name should take that rule (or be passed).
func TestS24CookieConditionMatchesTheNameTheOriginReads(t *testing.T) {
	for _, c := range []struct {
		name, cookie string
		fold         func(string) string
	}{
		{"aspnet-case", "AUTH_TOKEN=mallory", strings.ToLower},
		{"php-dot", "auth.token=mallory", func(n string) string { return strings.NewReplacer(".", "_", " ", "_").Replace(n) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			site := ruleSite(t, `
- {name: logged-in, match: {cookie: auth_token}, bypass: true}
- {name: pages, default_ttl: 1m}
`)
			p := newRuleProxy(t, site, func(w http.ResponseWriter, r *http.Request) {
				user := "guest"
				for _, ck := range r.Cookies() {
					if c.fold(ck.Name) == "auth_token" {
						user = ck.Value
						break
					}
				}
				w.Header().Set("Cache-Control", "max-age=60")
				_, _ = writeString(w, "welcome "+user)
			}, nil)
			if m := p.get("/", "Cookie", c.cookie); !strings.Contains(m.Body.String(), "mallory") {
				t.Fatalf("the origin did not read %q as a session: %q", c.cookie, m.Body.String())
			}
			anon := p.get("/")
			if strings.Contains(anon.Body.String(), "mallory") {
				t.Errorf("an anonymous visitor got %q (Cache-Status %q): the request with Cookie %q was not bypassed though the origin read it as auth_token",
					anon.Body.String(), anon.Header().Get("Cache-Status"), c.cookie)
			}
		})
	}
}
