package proxy

import (
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// The isolation property: whatever the origin does, no byte or header
// field marked for one user is ever returned to another, unless the origin
// declared that very response shareable. The origin below personalizes
// every response it does not declare shareable (its body, ETag and
// Set-Cookie carry "user-N" of the requester), and attaches the
// requester's Set-Cookie to shareable ones too (a per-user field). Users
// send distinct cookies and sometimes credentials and hop-by-hop tricks,
// concurrently, through coalescing, revalidation, stale-while-revalidate
// and stale-if-error; the test checks every response a user receives.

// behaviour is how the property origin answers for one URL.
type behaviour int

const (
	bPublic      behaviour = iota // max-age, shareable body, ETag; per-user Set-Cookie on 200 and 304
	bNoHeaders                    // no Cache-Control, no validators: a logged-in page
	bPrivate                      // private, personalized
	bNoStore                      // no-store, personalized
	bVaryCookie                   // max-age + Vary: Cookie, personalized (keyed on the cookie)
	bSWR                          // max-age=1, stale-while-revalidate, shareable body, per-user Set-Cookie
	bSIE                          // max-age=1, stale-if-error; the origin fails now and then
	bNoCacheETag                  // no-cache with a per-user ETag, personalized
	bAuthShared                   // s-maxage: shareable even for Authorization requests
	bNoType                       // shareable, no Content-Type, nosniff
	bVaryLang                     // max-age + Vary: Accept-Language; the body names the language the origin saw
	nBehaviours
)

type propertyOrigin struct {
	mu      sync.Mutex
	kinds   map[string]behaviour
	version map[string]int
	fail    bool
	clk     *clock
}

// user extracts the requesting user from what the origin saw.
func originUser(r *http.Request) string {
	if c, err := r.Cookie("uid"); err == nil {
		return c.Value
	}
	if a := r.Header.Get("Authorization"); a != "" {
		return strings.TrimPrefix(a, "Bearer ")
	}
	return "anonymous"
}

func (o *propertyOrigin) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	o.mu.Lock()
	kind := o.kinds[r.URL.Path]
	ver := o.version[r.URL.Path]
	fail := o.fail
	o.mu.Unlock()
	u := originUser(r)
	h := w.Header()
	h.Set("Date", o.clk.Now().Format(http.TimeFormat))
	if kind != bNoType {
		h.Set("Content-Type", "text/plain")
	} else {
		h["Content-Type"] = nil // keep net/http from sniffing one in
	}
	personal := "personal for " + u
	// A shared page renders what an origin that trusts its proxy renders:
	// forwarding fields, and a custom field (keyed by the edge). A client
	// that sends them with its own name must never reach another user.
	shared := fmt.Sprintf("shared %s v%d base=%s%s%s", r.URL.Path, ver,
		r.Header.Get("X-Forwarded-Prefix"), r.Header.Get("X-Asset-Base"), r.Header.Get("X-Original-Host"))
	setCookie := func() { h.Add("Set-Cookie", "session="+u+"; Path=/") }
	etagMatch := func(etag string) bool { return r.Header.Get("If-None-Match") == etag }
	switch kind {
	case bPublic, bSWR, bAuthShared, bNoType:
		etag := fmt.Sprintf(`"v%d"`, ver)
		h.Set("ETag", etag)
		switch kind {
		case bPublic, bNoType:
			h.Set("Cache-Control", "max-age=2")
		case bSWR:
			h.Set("Cache-Control", "max-age=1, stale-while-revalidate=30")
		case bAuthShared:
			h.Set("Cache-Control", "s-maxage=2")
		}
		if kind == bNoType {
			h.Set("X-Content-Type-Options", "nosniff")
		}
		setCookie()
		if etagMatch(etag) {
			w.WriteHeader(http.StatusNotModified)
			return
		}
		_, _ = io.WriteString(w, shared)
	case bNoHeaders:
		_, _ = io.WriteString(w, personal)
	case bVaryLang:
		h.Set("Cache-Control", "max-age=2")
		h.Set("Vary", "Accept-Language")
		lang := r.Header.Get("Accept-Language")
		if lang == "" {
			lang = "none"
		}
		_, _ = io.WriteString(w, "lang="+lang)
	case bPrivate:
		h.Set("Cache-Control", "private, max-age=60")
		setCookie()
		_, _ = io.WriteString(w, personal)
	case bNoStore:
		h.Set("Cache-Control", "no-store")
		_, _ = io.WriteString(w, personal)
	case bVaryCookie:
		h.Set("Cache-Control", "max-age=2")
		h.Set("Vary", "Cookie")
		_, _ = io.WriteString(w, personal)
	case bSIE:
		if fail {
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = io.WriteString(w, "down")
			return
		}
		h.Set("Cache-Control", "max-age=1, stale-if-error=60")
		setCookie()
		_, _ = io.WriteString(w, shared)
	case bNoCacheETag:
		etag := `"` + u + `"`
		h.Set("ETag", etag)
		h.Set("Cache-Control", "no-cache")
		setCookie()
		if etagMatch(etag) {
			w.WriteHeader(http.StatusNotModified)
			return
		}
		_, _ = io.WriteString(w, personal)
	}
}

// runIsolation drives one random scenario and fails t on any leak.
// isolationRules are the rule sets scenarios run under (package rules): each
// lengthens, forces or shapes what the cache keeps, none says a personal
// answer may be shared, so none may make one reach another user.
var isolationRules = []string{
	"",
	`[{name: r, default_ttl: 1h}]`,
	`[{name: r, ttl: 1h, stale_while_revalidate: 1h, stale_if_error: 1h}]`,
	`[{name: r, min_ttl: 30m, client_no_cache: ignore}]`,
	`[{name: r, default_ttl: 10m, client_no_cache: coalesce, revalidate_interval: 5s, key: {ignore_params: [x], sort_params: true}}]`,
	`[{name: e, match: {status: [503, 200]}, ttl: 1h}, {name: r, default_ttl: 1h}]`,
	`[{name: c, match: {cookie: uid}, ttl: 1h}, {name: r, ttl: 1h, response_headers: {set: {X-R: "1"}}}]`,
	`[{name: u, match: {path: /u1}, strip_cookies: true, ttl: 1h}, {name: r, default_ttl: 1h, key: {device: true}}]`,
}

func runIsolation(t *testing.T, seed uint64, rounds, users, urls int, storeSetCookie bool) {
	runIsolationUnder(t, seed, rounds, users, urls, storeSetCookie, "")
}

func runIsolationUnder(t *testing.T, seed uint64, rounds, users, urls int, storeSetCookie bool, ruleSrc string) {
	var site *Site
	if ruleSrc != "" {
		site = ruleSite(t, ruleSrc)
	}
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	clk := &clock{now: t0}
	o := &propertyOrigin{kinds: map[string]behaviour{}, version: map[string]int{}, clk: clk}
	for i := range urls {
		o.kinds[fmt.Sprintf("/u%d", i)] = behaviour(rng.IntN(int(nBehaviours)))
	}
	srv := httptest.NewServer(o)
	defer srv.Close()
	cfg := DefaultConfig()
	cfg.Now = clk.Now
	cfg.Policy.StoreSetCookie = storeSetCookie
	store := NewStore(8<<20, 8)
	h := New(cfg, store, &originFetcher{base: srv.URL, client: &http.Client{Transport: &http.Transport{}}}, NewMetrics(prometheus.NewRegistry(), store), nil)

	type req struct {
		user, path                string
		auth, dropCookie, noCache bool
		lang                      string
		dropLang                  bool
		fields                    int // 0: none; 1: forwarding fields; 2: a keyed field; 3: underscore spellings
	}
	for round := range rounds {
		// The world moves: time passes, pages change, the origin fails.
		clk.Set(clk.Now().Add(time.Duration(rng.IntN(1500)) * time.Millisecond))
		o.mu.Lock()
		o.fail = rng.IntN(4) == 0
		if rng.IntN(3) == 0 {
			o.version[fmt.Sprintf("/u%d", rng.IntN(urls))]++
		}
		o.mu.Unlock()
		n := 1 + rng.IntN(6)
		reqs := make([]req, n)
		for i := range reqs {
			reqs[i] = req{user: fmt.Sprintf("user-%d", rng.IntN(users)), path: fmt.Sprintf("/u%d", rng.IntN(urls)),
				auth: rng.IntN(5) == 0, dropCookie: rng.IntN(8) == 0, noCache: rng.IntN(10) == 0,
				lang: []string{"de", "en", "fr"}[rng.IntN(3)], dropLang: rng.IntN(6) == 0, fields: max(0, rng.IntN(8)-4)}
		}
		var wg sync.WaitGroup
		for _, rq := range reqs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r := httptest.NewRequest("GET", "http://example.com"+rq.path, nil)
				r.Header.Set("Cookie", "uid="+rq.user)
				if rq.auth {
					r.Header.Set("Authorization", "Bearer "+rq.user)
				}
				r.Header.Set("Accept-Language", rq.lang)
				if rq.dropCookie {
					r.Header.Add("Connection", "Cookie") // the origin never sees the cookie
				}
				if rq.dropLang {
					r.Header.Add("Connection", "Accept-Language") // nor the language
				}
				if rq.noCache {
					r.Header.Set("Cache-Control", "no-cache")
				}
				switch rq.fields {
				case 1:
					r.Header.Set("X-Forwarded-Prefix", "//"+rq.user+".example")
					r.Header.Set("X-Original-Host", rq.user+".example")
				case 2:
					r.Header.Set("X-Asset-Base", "//"+rq.user+".example")
				case 3:
					r.Header["X_Forwarded_Prefix"] = []string{"//" + rq.user + ".example"}
				}
				w := httptest.NewRecorder()
				if site != nil {
					h.ServeInbound(w, r, Inbound{Site: site})
				} else {
					h.ServeHTTP(w, r)
				}
				var all strings.Builder
				all.WriteString(w.Body.String())
				for k, vs := range w.Header() {
					all.WriteString("\n" + k + ": " + strings.Join(vs, ", "))
				}
				text := all.String()
				for u := range users {
					other := fmt.Sprintf("user-%d", u)
					if other != rq.user && containsUser(text, other) {
						t.Errorf("seed %d round %d: %s got %s's data from %s (%v): %q", seed, round, rq.user, other, rq.path, o.kinds[rq.path], text)
					}
				}
				if o.kinds[rq.path] == bVaryLang && w.Code == 200 {
					want := "lang=" + rq.lang
					if rq.dropLang {
						want = "lang=none"
					}
					if w.Body.String() != want {
						t.Errorf("seed %d round %d: asked for %q, got %q (Cache-Status %q)", seed, round, want, w.Body.String(), w.Header().Get("Cache-Status"))
					}
				}
				if w.Header().Get("Content-Type") != "" && o.kinds[rq.path] == bNoType && w.Code == 200 {
					t.Errorf("seed %d: a Content-Type was invented: %q", seed, w.Header().Get("Content-Type"))
				}
			}()
		}
		wg.Wait()
		h.Wait()
	}
}

// containsUser reports whether s names user (not a longer id like user-10
// for user-1).
func containsUser(s, user string) bool {
	for i := 0; ; {
		j := strings.Index(s[i:], user)
		if j < 0 {
			return false
		}
		end := i + j + len(user)
		if end == len(s) || s[end] < '0' || s[end] > '9' {
			return true
		}
		i = end
	}
}

// TestIsolationProperty runs random scenarios in bounded time.
func TestIsolationProperty(t *testing.T) {
	seeds := 12
	if testing.Short() {
		seeds = 3
	}
	for seed := range uint64(seeds) {
		runIsolation(t, seed, 40, 4, 6, seed%2 == 1)
	}
}

// TestIsolationPropertyUnderRules runs scenarios under each rule set.
func TestIsolationPropertyUnderRules(t *testing.T) {
	seeds := 3
	if testing.Short() {
		seeds = 1
	}
	for i, src := range isolationRules[1:] {
		for seed := range uint64(seeds) {
			runIsolationUnder(t, 1000*uint64(i+1)+seed, 30, 4, 6, seed%2 == 1, src)
		}
	}
}

// FuzzIsolation explores more scenarios under `make fuzz`.
func FuzzIsolation(f *testing.F) {
	f.Add(uint64(1), uint8(20), false, uint8(0))
	f.Add(uint64(77), uint8(30), true, uint8(3))
	f.Fuzz(func(t *testing.T, seed uint64, rounds uint8, storeSetCookie bool, rules uint8) {
		runIsolationUnder(t, seed, int(rounds%40)+1, 3, 4, storeSetCookie, isolationRules[int(rules)%len(isolationRules)])
	})
}
