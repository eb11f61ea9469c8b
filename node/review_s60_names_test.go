package node

import "testing"

// TestS60FrozenNamesAgreeWithTheTable: names(), the host→name mapping a
// reload's purge record keeps, answers as the table's own nameOf for
// every spelling of a host the fronts may see (IPv6 literals with and
// without a port, wildcards, the default site, the one-site shortcut,
// upper case, ports, a trailing dot, and what is not a host).
func TestS60FrozenNamesAgreeWithTheTable(t *testing.T) {
	shop, wild, v6, def := &site{name: "shop"}, &site{name: "wild"}, &site{name: "v6"}, &site{name: "def"}
	hosts := []string{"", "shop.test", "SHOP.test", "shop.test.", "shop.test:8080", "shop.test:x", "a.shop.test", "A.Shop.Test:443",
		"a.b.shop.test", "shop.test..", "other.test", "[::1]", "[::1]:80", "[0:0::1]", "::1", "[::1", "[fe80::1%eth0]", "x.[::1]",
		"127.0.0.1", "127.0.0.1:80", ".shop.test", "shop", "*.shop.test"}
	for _, tc := range []struct {
		name string
		t    *siteTable
	}{
		{"exact-wild-default", &siteTable{exact: map[string]*site{"shop.test": shop, "::1": v6, "127.0.0.1": shop}, wild: map[string]*site{"shop.test": wild}, def: def}},
		{"no-default", &siteTable{exact: map[string]*site{"shop.test": shop, "::1": v6}, wild: map[string]*site{"shop.test": wild}}},
		{"default-is-wild", &siteTable{exact: map[string]*site{"shop.test": shop}, wild: map[string]*site{"shop.test": wild}, def: wild}},
		{"shortcut", func() *siteTable {
			s := &site{name: "only", shortcut: true}
			return &siteTable{exact: map[string]*site{}, wild: map[string]*site{}, any: s}
		}()},
	} {
		frozen := tc.t.names()
		for _, h := range hosts {
			if got, want := frozen(h), tc.t.nameOf(h); got != want {
				t.Errorf("%s: host %q: frozen names say %q, the table %q", tc.name, h, got, want)
			}
		}
	}
}
