package proxy

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/edgecache/edge/disk"
)

// attachDiskPromote gives h's store a disk tier where every response goes
// to disk only and the first disk hit is promoted into RAM.
func attachDiskPromote(t *testing.T, h *Handler) *disk.Tier {
	t.Helper()
	tier, err := disk.Open(disk.Options{Dir: t.TempDir(), MaxBytes: 64 << 20})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tier.Close(context.Background()) })
	h.store.AttachDisk(tier, TierOptions{PromoteHits: 1})
	return tier
}

// evictRAM empties the RAM tier as its LRU evicts (the disk keeps all).
func evictRAM(h *Handler) {
	h.store.mu.Lock()
	h.store.lru.Purge()
	h.store.mu.Unlock()
}

// A cookie-conditional rule's lifetime is the cookie request's; a fill by
// such a request under an operator's ttl is not stored (personal
// heuristic). revive(rec, life) applies the *current* request's rule to a
// disk hit, and the promoted RAM copy kept it: one member's disk hit gave
// every anonymous visitor the members' day-long ttl on an answer the
// origin made fresh for a minute (a review's test; a disk hit is now
// promoted only when its lifetime is every request's: lifetimeShared).
func TestCookieRuleLifetimeNeverReachesOthersThroughPromotion(t *testing.T) {
	src := `
- {name: members, match: {cookie: member}, ttl: 24h}
- {name: pages}
`
	for _, withDisk := range []bool{false, true} {
		name := "ram"
		if withDisk {
			name = "disk"
		}
		t.Run(name, func(t *testing.T) {
			p := newRuleProxy(t, ruleSite(t, src), func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Cache-Control", "public, max-age=60")
				_, _ = writeString(w, "price at "+r.Header.Get("Date"))
			}, nil)
			var tier *disk.Tier
			if withDisk {
				tier = attachDiskPromote(t, p.h)
			}
			p.get("/p") // anonymous fill: 60s
			if tier != nil {
				rvFlush(t, tier)
				evictRAM(p.h) // RAM let it go: the next hit reads the disk
			}
			mw := p.get("/p", "Cookie", "member=1") // a member's hit (from disk: revived and promoted)
			t.Logf("member: %q calls %d", mw.Header().Get("Cache-Status"), p.calls.Load())
			if tier != nil {
				t.Logf("disk %+v promoted %d", tier.Stats(), p.h.store.Promoted())
			}
			p.advance(2 * time.Minute)
			before := p.calls.Load()
			w := p.get("/p") // anonymous, the origin's minute long gone
			if p.calls.Load() == before {
				t.Fatalf("%s: an anonymous request 2 minutes after a max-age=60 fill was served without the origin (Cache-Status %q, Age %q): a member's rule ttl 24h reached the shared entry",
					name, w.Header().Get("Cache-Status"), w.Header().Get("Age"))
			}
		})
	}
}

// The first case fix compared a path with its lower-cased spelling, which
// covered only rules written in lower case (rules now also match folded:
// matchPathFold). ASP.NET MVC's conventions are
// capitalised (/Account/Login, /Manage/): an operator writes the bypass as
// the site spells it, and a victim who follows a link to /account/manage
// (all lower case: hasUpper is false, no second look) is answered by
// IIS / ASP.NET Core's case-insensitive routing with their account page,
// stored under the pages rule and served to the next user.
func TestBypassWrittenWithCapitalsCoversLowerCase(t *testing.T) {
	for _, src := range []string{
		"- {name: account, match: {path: /Account/}, bypass: true}\n- {name: pages, default_ttl: 5m}\n",
		"- {name: account, match: {path_regex: '^/Account/'}, bypass: true}\n- {name: pages, default_ttl: 5m}\n",
	} {
		p := newRuleProxy(t, ruleSite(t, src), func(w http.ResponseWriter, r *http.Request) {
			if !strings.HasPrefix(strings.ToLower(r.URL.Path), "/account/") { // case-insensitive routing
				_, _ = writeString(w, "page")
				return
			}
			user := "anonymous"
			if c, err := r.Cookie("sid"); err == nil {
				user = c.Value
			}
			w.Header().Set("Cache-Control", "max-age=60")
			_, _ = writeString(w, "account of "+user)
		}, nil)
		for _, target := range []string{"/account/manage", "/ACCOUNT/manage", "/aCCOUNT/manage"} {
			alice := p.get(target, "Cookie", "sid=alice")
			if !strings.Contains(alice.Body.String(), "alice") {
				t.Fatalf("%s: alice got %q", target, alice.Body.String())
			}
			next := p.get(target)
			if strings.Contains(next.Body.String(), "alice") {
				t.Errorf("rules %q: %s: the next user got %q (Cache-Status %q): the bypass of /Account/ did not cover this spelling",
					strings.SplitN(src, "\n", 2)[0], target, next.Body.String(), next.Header().Get("Cache-Status"))
			}
		}
	}
}

// phpGetNames is the names PHP's $_GET gives a raw query's parameters
// (main/php_variables.c, php_register_variable_ex): the name is a C
// string (cut at NUL), leading spaces are skipped, ' ' and '.' read as
// '_' up to the first '[', and a '[' with a ']' after it opens an array
// named by what came before (id[]=2 is $_GET['id'] = ['2']).
func phpGetNames(raw string) map[string]string {
	out := map[string]string{}
	for _, p := range strings.Split(raw, "&") {
		k, v, _ := strings.Cut(p, "=")
		k, _ = url.QueryUnescape(k)
		k, _, _ = strings.Cut(k, "\x00")
		k = strings.TrimLeft(k, " ")
		b := []byte(k)
		for i := 0; i < len(b); i++ {
			if b[i] == '[' {
				if strings.IndexByte(string(b[i:]), ']') > 0 {
					b, v = b[:i], "Array"
				} else {
					b[i] = '_'
				}
				break
			}
			if b[i] == ' ' || b[i] == '.' {
				b[i] = '_'
			}
		}
		out[string(b)] = v
	}
	return out
}

// foldParamName read '[' as '_' always (it now takes an array's base name
// and cuts at NUL); PHP (and Rack, and ASP.NET
// Core's model binding) read name[] and name[k] as the parameter name,
// an array, and PHP cuts a name at %00. allow_params: [per_page] drops
// per_page[]=1 and per_page%00x=1 from the key, and the origin reads
// per_page: the catalogue page was stored, for everyone, as another one.
func TestAllowParamsCannotBeCloakedByPHPArraysAndNUL(t *testing.T) {
	for _, cloaked := range []string{
		"/v1/products?per_page[]=1",
		"/v1/products?per_page[0]=1",
		"/v1/products?per.page[x]=1",
		"/v1/products?per_page%00x=1",
	} {
		t.Run(cloaked, func(t *testing.T) {
			site := ruleSite(t, `[{name: catalogue, match: {path: /v1/products}, default_ttl: 30s, key: {allow_params: [page, per_page, category], sort_params: true}}]`)
			p := newRuleProxy(t, site, func(w http.ResponseWriter, r *http.Request) {
				q := phpGetNames(r.URL.RawQuery)
				_, _ = writeString(w, "products per_page="+q["per_page"])
			}, nil)
			if w := p.get(cloaked); w.Body.String() == "products per_page=" {
				t.Fatalf("%s: the PHP model did not read per_page: %q", cloaked, w.Body.String())
			}
			if w := p.get("/v1/products"); w.Body.String() != "products per_page=" {
				t.Errorf("GET /v1/products got %q (Cache-Status %q) after %s: a parameter the key dropped reached the origin as an allowed one", w.Body.String(), w.Header().Get("Cache-Status"), cloaked)
			}
		})
	}
}

// The first case check passed every path whose lower-cased spelling picked
// another rule, on every site: a site whose rules name extensions in
// lower case (*.jpg, the usual spelling) had each upload a camera named
// IMG_1234.JPG passed, never stored, although the origin says
// max-age=3600 (a review's test). Only rules that keep answers apart (a
// bypass, a key on the request) make a case difference ambiguous now.
func TestCapitalisedExtensionIsStillCached(t *testing.T) {
	for _, src := range []string{
		`[{name: images, match: {path: "*.jpg"}, ttl: 720h}]`,
		"- {name: images, match: {path: \"*.jpg\"}, ttl: 720h}\n- {name: pages, default_ttl: 5m}\n",
	} {
		p := newRuleProxy(t, ruleSite(t, src), func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Cache-Control", "public, max-age=3600")
			w.Header().Set("Content-Type", "image/jpeg")
			_, _ = writeString(w, "jpeg bytes")
		}, nil)
		for range 3 {
			p.get("/wp-content/uploads/2024/05/IMG_1234.JPG")
		}
		w := p.get("/wp-content/uploads/2024/05/IMG_1234.JPG")
		if n := p.calls.Load(); n != 1 {
			t.Errorf("rules %s: 4 GETs of a max-age=3600 image named .JPG reached the origin %d times (Cache-Status %q)", src, n, w.Header().Get("Cache-Status"))
		}
	}
}

// A purge looks its key up for a slice manifest (forSlices:
// store.Lookup(key, nil)), which reads the disk and, on the promoting hit
// (PromoteHits 1, the default), copied the entry into RAM revived with no
// rules' lifetime at all. A soft purge then marked that copy stale, the
// next request revalidated it, and the 304's entry kept the copy's nil
// lifetime: the site's max_ttl 1m was gone (a review's test; a purge's
// look-up no longer promotes).
func TestSoftPurgeKeepsTheRulesLifetime(t *testing.T) {
	for _, withDisk := range []bool{false, true} {
		t.Run(map[bool]string{false: "in-ram", true: "evicted-to-disk"}[withDisk], func(t *testing.T) { softPurgeLife(t, withDisk) })
	}
}

func softPurgeLife(t *testing.T, withDisk bool) {
	p := newRuleProxy(t, ruleSite(t, `[{name: ceiling, max_ttl: 1m}]`), func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "public, max-age=3600")
		w.Header().Set("ETag", `"v1"`)
		if r.Header.Get("If-None-Match") == `"v1"` {
			w.WriteHeader(http.StatusNotModified)
			return
		}
		_, _ = writeString(w, "price")
	}, nil)
	tier := attachDiskPromote(t, p.h)
	p.get("/x")
	rvFlush(t, tier)
	if withDisk {
		evictRAM(p.h) // RAM let it go; the disk keeps it (control: RAM still holds it)
	}
	if _, err := p.h.Purge(PurgeRequest{Prefix: "/x", Soft: true}); err != nil {
		t.Fatal(err)
	}
	p.get("/x") // revalidated: 304
	calls := p.calls.Load()
	p.advance(2 * time.Minute)
	w := p.get("/x")
	if p.calls.Load() == calls {
		t.Fatalf("max_ttl 1m: 2 minutes after a revalidation the entry was served without asking the origin (Cache-Status %q, Age %q, promoted %d)",
			w.Header().Get("Cache-Status"), w.Header().Get("Age"), p.h.store.Promoted())
	}
}
