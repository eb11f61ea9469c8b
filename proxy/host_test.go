package proxy

import (
	"strings"
	"testing"
)

func TestCanonicalHost(t *testing.T) {
	for in, want := range map[string]string{
		"": "", "shop.test": "shop.test", "SHOP.Test": "shop.test", "shop.test.": "shop.test", "shop.test:80": "shop.test",
		"shop.test:": "shop.test", "shop.test.:8080": "shop.test", "127.0.0.1:99": "127.0.0.1", "[::1]": "[::1]",
		"[::1]:8080": "[::1]", "[2001:DB8:0:0:0:0:0:1]": "[2001:db8::1]", "a_b.test": "a_b.test", "xn--bcher-kva.test": "xn--bcher-kva.test",
	} {
		got, ok := CanonicalHost(in)
		if !ok || got != want {
			t.Errorf("CanonicalHost(%q) = %q, %v; want %q", in, got, ok, want)
		}
	}
	for _, bad := range []string{
		"shop.test:x", "[shop.test]", "shop.test:99999", "shop.test:1:2", "::1", "[::1", "[::1]x", "[::1]:x", "[fe80::1%25eth0]",
		"shop..test", ".shop.test", ".", ":80", "shop test", "shop.test/x", "user@shop.test", "shop.test\x00", "shop\"x",
		"shop.test:123456", "ex%61mple.test",
	} {
		if got, ok := CanonicalHost(bad); ok {
			t.Errorf("CanonicalHost(%q) = %q, accepted", bad, got)
		}
	}
}

// Every spelling of a host that reaches a site gets the one key a purge
// of the plain spelling removes.
func TestCacheKeyOfEverySpelling(t *testing.T) {
	want := CacheKey("http", "shop.test", "/a", "")
	for _, h := range []string{"SHOP.test", "shop.test.", "shop.test:8080", "shop.test.:80", "Shop.Test.:"} {
		if got := CacheKey("http", h, "/a", ""); got != want {
			t.Errorf("CacheKey for Host %q = %q, want %q", h, got, want)
		}
	}
}

// FuzzCanonicalHost: the canonical form is a fixed point, lower case,
// without a port or a trailing dot.
func FuzzCanonicalHost(f *testing.F) {
	for _, s := range []string{"shop.test", "SHOP.test.:80", "[::1]:8080", "shop.test:x", "[shop.test]", "a..b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		c, ok := CanonicalHost(in)
		if !ok {
			return
		}
		again, ok2 := CanonicalHost(c)
		if !ok2 || again != c {
			t.Fatalf("CanonicalHost(%q) = %q, but that gives %q, %v", in, c, again, ok2)
		}
		if strings.ToLower(c) != c || strings.HasSuffix(c, ".") || (strings.Contains(c, ":") && !strings.HasPrefix(c, "[")) {
			t.Fatalf("CanonicalHost(%q) = %q is not canonical", in, c)
		}
	})
}
