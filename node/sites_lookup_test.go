package node

import "testing"

// One host is one site however the Host field spells it: case, a port, a
// trailing dot, an IPv6 literal with or without a port.
func TestSiteLookupSpellings(t *testing.T) {
	shop, v6 := &site{name: "shop"}, &site{name: "v6"}
	tbl := &siteTable{exact: map[string]*site{"shop.example": shop, "2001:db8::1": v6}, wild: map[string]*site{}}
	for host, want := range map[string]*site{
		"shop.example": shop, "SHOP.Example:8443": shop, "shop.example.": shop,
		"[2001:db8::1]": v6, "[2001:db8::1]:8080": v6, "[2001:DB8::1]": v6,
		"other.example": nil, "[": nil, "": nil,
	} {
		if got := tbl.lookup(host); got != want {
			t.Errorf("lookup(%q) = %v, want %v", host, got, want)
		}
	}
}
