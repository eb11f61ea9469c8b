package proxy

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

// Attacks from the second hostile review of the field-keying change: one
// client turning the cache off for everyone (a logged-in user's private
// answer, a keyed request redefining how a URL varies). Each failed before
// its fix.

// A logged-in visitor's request (Cookie, a Neutral field, not keyed and
// not in Vary) whose answer is private makes the URL hit-for-pass for
// every anonymous visitor: notStored adds m.passKey, which for a request
// without keyed fields is the bare URL key. With Cache-Control: no-cache
// the stored shared entry is removed first (fillFrom: responseSide).
func TestOneCookieRequestDisablesCacheForEveryone(t *testing.T) {
	h, calls := handlerProxy(t, func(w http.ResponseWriter, r *http.Request) {
		if strings.Contains(r.Header.Get("Cookie"), "session=") {
			w.Header().Set("Cache-Control", "private, max-age=0")
			_, _ = io.WriteString(w, "hello user")
			return
		}
		w.Header().Set("Cache-Control", "public, max-age=3600")
		_, _ = io.WriteString(w, "anonymous page")
	}, nil)
	serve(h, "GET", "/home")
	if w := serve(h, "GET", "/home"); !strings.Contains(w.Header().Get("Cache-Status"), "hit") {
		t.Fatal("setup: not a hit")
	}
	// One request from one client.
	a := serve(h, "GET", "/home", "Cookie", "session=x", "Cache-Control", "no-cache")
	t.Logf("attacker: %q", a.Header().Get("Cache-Status"))
	before := calls.Load()
	bypass := 0
	for i := 0; i < 5; i++ {
		w := serve(h, "GET", "/home")
		if i == 0 || i == 4 {
			t.Logf("anonymous visitor %d: %q", i, w.Header().Get("Cache-Status"))
		}
		if !strings.Contains(w.Header().Get("Cache-Status"), "hit") {
			bypass++
		}
	}
	t.Logf("origin calls for 5 anonymous visitors: %d", calls.Load()-before)
	if bypass > 0 {
		t.Fatalf("after one logged-in request, %d of 5 anonymous requests bypassed the cache", bypass)
	}
}

// The cold case: the first request for a page after it expired (or was
// purged) comes from a logged-in visitor; the URL is then hit-for-pass
// for every anonymous visitor for cache.pass_ttl.
func TestColdCookieRequestDisablesCacheForEveryone(t *testing.T) {
	h, calls := handlerProxy(t, func(w http.ResponseWriter, r *http.Request) {
		if strings.Contains(r.Header.Get("Cookie"), "session=") {
			w.Header().Set("Cache-Control", "private")
			_, _ = io.WriteString(w, "hello user")
			return
		}
		w.Header().Set("Cache-Control", "public, max-age=3600")
		_, _ = io.WriteString(w, "anonymous page")
	}, nil)
	serve(h, "GET", "/home", "Cookie", "session=x")
	before := calls.Load()
	for i := 0; i < 5; i++ {
		serve(h, "GET", "/home")
	}
	w := serve(h, "GET", "/home")
	t.Logf("6th anonymous visitor: %q; origin calls for 6 anonymous visitors: %d", w.Header().Get("Cache-Status"), calls.Load()-before)
	if calls.Load()-before > 1 {
		t.Fatalf("one logged-in request made %d anonymous requests for a public page go to the origin", calls.Load()-before)
	}
}

// A keyed request whose response names other Vary fields than the URL's
// current ones makes putLocked drop every variant of the URL (the
// "newest response defines how the URL varies" branch), bypassing the
// madeForKeyedFields rule that a keyed request never displaces a shared
// variant. Origin: a page that varies on Accept-Language and, when it
// renders X-Asset-Base, says so with Vary.
func TestKeyedVaryChangeWipesPlainVariants(t *testing.T) {
	h, calls := handlerProxy(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "public, max-age=3600")
		if b := r.Header.Get("X-Asset-Base"); b != "" {
			w.Header().Set("Vary", "Accept-Language, X-Asset-Base")
			_, _ = io.WriteString(w, "lang="+r.Header.Get("Accept-Language")+" base="+b)
			return
		}
		w.Header().Set("Vary", "Accept-Language")
		_, _ = io.WriteString(w, "lang="+r.Header.Get("Accept-Language"))
	}, nil)
	langs := []string{"en", "fr", "de"}
	for _, l := range langs {
		serve(h, "GET", "/home", "Accept-Language", l)
	}
	for _, l := range langs {
		if w := serve(h, "GET", "/home", "Accept-Language", l); !strings.Contains(w.Header().Get("Cache-Status"), "hit") {
			t.Fatalf("setup: %s not a hit", l)
		}
	}
	before := calls.Load()
	serve(h, "GET", "/home", "X-Asset-Base", "//junk.example") // one keyed request
	misses := 0
	for _, l := range langs {
		w := serve(h, "GET", "/home", "Accept-Language", l)
		t.Logf("plain %s after one keyed request: %q", l, w.Header().Get("Cache-Status"))
		if !strings.Contains(w.Header().Get("Cache-Status"), "hit") {
			misses++
		}
	}
	t.Logf("origin calls: %d before the keyed request, %d after", before, calls.Load())
	if misses > 0 {
		t.Fatalf("one request with a keyed field evicted %d shared plain variants", misses)
	}
}
