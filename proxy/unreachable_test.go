package proxy

import (
	"io"
	"net/http"
	"sync/atomic"
	"testing"
)

func TestSiteAndHostOfKey(t *testing.T) {
	for _, tc := range []struct {
		key, site, host string
		ok              bool
	}{
		{"shop http://shop.test/a?b=1", "shop", "shop.test", true},
		{"http://shop.test/a", "", "shop.test", true},
		{"shop http://shop.test", "shop", "shop.test", true},
		{"shop http://shop.test?x", "shop", "shop.test", true},
		{"shop http://shop.test/a\x00bytes=0-1", "shop", "shop.test", true},
		{"shop http://[::1]/a", "shop", "[::1]", true},
		{"shop", "", "", false},
		{"", "", "", false},
		{"a b http://x/", "a", "x", true}, // never made: names hold no space
	} {
		site, host, ok := siteAndHostOfKey(tc.key)
		if site != tc.site || host != tc.host || ok != tc.ok {
			t.Errorf("siteAndHostOfKey(%q) = %q, %q, %v; want %q, %q, %v", tc.key, site, host, ok, tc.site, tc.host, tc.ok)
		}
	}
}

// TestDropUnreachableTakesWhatNoSiteServes: what a site stored goes once
// the configuration gives its host another site, so a purge made
// meanwhile (which names the URL under the host's new site) is not undone
// by giving the host its old site back.
func TestDropUnreachableTakesWhatNoSiteServes(t *testing.T) {
	var site atomic.Value
	site.Store("old")
	h, calls := handlerProxy(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=600")
		_, _ = io.WriteString(w, "page")
	}, func(c *Config) { c.SiteOf = func(string) string { return site.Load().(string) } })
	serve(h, "GET", "/a")
	serve(h, "GET", "/a")
	if calls.Load() != 1 {
		t.Fatalf("origin asked %d times, want 1 (stored)", calls.Load())
	}
	if n := h.DropUnreachable(); n != 0 {
		t.Errorf("nothing moved: %d dropped", n)
	}
	site.Store("new")
	if n := h.DropUnreachable(); n != 1 {
		t.Errorf("the host moved to another site: %d dropped, want 1", n)
	}
	site.Store("old")
	serve(h, "GET", "/a")
	if calls.Load() != 2 {
		t.Errorf("the old site's copy came back: origin asked %d times, want 2", calls.Load())
	}
}
