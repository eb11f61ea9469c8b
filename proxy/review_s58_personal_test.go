package proxy

import (
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestS58BrowserTTLZeroLifetimeSpeltOtherwiseReachesCredentials: 0a93e8e
// keeps the answer to a request with credentials as the origin made it
// when its lifetime is zero ("max-age=0, must-revalidate": each reuse is
// checked with the requester's own credentials), but it recognises zero
// only as the literal token "max-age=0" / "s-maxage=0". The edge's own
// parser (parseDeltaSeconds) reads max-age="0" and max-age=00 as zero,
// and Expires at or before Date with no max-age is a zero lifetime too
// (RFC 9111 §4.2.1). Each is stored (must-revalidate lets a shared cache
// keep an Authorization answer), so Cache-Status says "stored", and the
// rewrite turns it into ten minutes of unchecked reuse, Expires deleted.
func TestS58BrowserTTLZeroLifetimeSpeltOtherwiseReachesCredentials(t *testing.T) {
	for _, tc := range []struct {
		name    string
		cc      string
		expires bool // Expires: the Date itself
	}{
		{"quoted", `max-age="0", must-revalidate`, false},
		{"leading-zero", `max-age=00, must-revalidate`, false},
		{"expires-now", `must-revalidate`, true},
		{"expires-invalid", `must-revalidate`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var p *ruleProxy
			p = newRuleProxy(t, ruleSite(t, `[{name: pages, browser_ttl: 10m}]`), func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Cache-Control", tc.cc)
				switch {
				case tc.expires:
					w.Header().Set("Expires", p.clk.Now().UTC().Format(http.TimeFormat))
				case tc.name == "expires-invalid":
					w.Header().Set("Expires", "0") // already expired (RFC 9111 §5.3)
				}
				w.Header().Set("ETag", `"v1"`)
				_, _ = w.Write([]byte("profile of " + r.Header.Get("Authorization")))
			}, nil)
			w := p.get("/api/me", "Authorization", "Bearer alice")
			if !strings.Contains(w.Body.String(), "alice") {
				t.Fatalf("%q", w.Body.String())
			}
			got := ParseCacheControl(w.Header(), "Cache-Control")
			if got.MaxAge > 0 {
				t.Errorf("origin sent Cache-Control %q (expires %v) to credentials; client got Cache-Control %q, Expires %q (Cache-Status %q): a shared cache after the edge may reuse alice's answer %d s without the origin's check",
					tc.cc, tc.expires, w.Header().Get("Cache-Control"), w.Header().Get("Expires"), w.Header().Get("Cache-Status"), got.MaxAge)
			}
		})
	}
}

// TestS58BrowserTTLSkipsACookieHoldersRevalidatedSharedAnswer: a page
// the origin marks public for a minute is stored and shared; a Cookie
// holder's request is rewritten to browser_ttl on the miss that stored it
// and on every hit. When the copy is stale and the origin's 304 refreshes
// it, the refreshed copy is stored and shared as well (revalidated puts
// it), but the Cache-Status of that answer says neither hit nor stored
// ("fwd=stale; fwd-status=304"), so sharedHere is false and the Cookie
// holder alone gets the origin's max-age=60 while everyone else gets
// browser_ttl: the operator's rule does not hold for signed-in users once
// per revalidation.
func TestS58BrowserTTLSkipsACookieHoldersRevalidatedSharedAnswer(t *testing.T) {
	p := newRuleProxy(t, ruleSite(t, `[{name: pages, browser_ttl: 10m}]`), func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "public, max-age=60")
		w.Header().Set("ETag", `"v1"`)
		if r.Header.Get("If-None-Match") == `"v1"` {
			w.WriteHeader(http.StatusNotModified)
			return
		}
		_, _ = w.Write([]byte("the same page for everyone"))
	}, nil)
	first := p.get("/news", "Cookie", "sid=alice")
	if cc := first.Header().Get("Cache-Control"); !strings.Contains(cc, "max-age=600") {
		t.Fatalf("the miss that stored it: Cache-Control %q (Cache-Status %q)", cc, first.Header().Get("Cache-Status"))
	}
	p.advance(2 * time.Minute)
	w := p.get("/news", "Cookie", "sid=alice")
	if w.Code != http.StatusOK || p.calls.Load() != 2 {
		t.Fatalf("revalidation: %d, %d origin calls", w.Code, p.calls.Load())
	}
	hit := p.get("/news", "Cookie", "sid=alice")
	if !strings.Contains(hit.Header().Get("Cache-Status"), "hit") {
		t.Fatalf("the refreshed copy was not stored: %q", hit.Header().Get("Cache-Status"))
	}
	if cc := w.Header().Get("Cache-Control"); !strings.Contains(cc, "max-age=600") {
		t.Errorf("a Cookie holder's answer refreshed by a 304 and stored (the next one is a hit, %q): Cache-Control %q, Cache-Status %q; the miss before and the hit after get %q",
			hit.Header().Get("Cache-Control"), cc, w.Header().Get("Cache-Status"), hit.Header().Get("Cache-Control"))
	}
}
