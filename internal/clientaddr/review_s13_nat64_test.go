package clientaddr

import (
	"net/netip"
	"testing"
)

// TestS13ClientTranslatedIPv4ClientsAreNotOneClient — a defect this review
// found, now mended (64:ff9b::/96 and Teredo are keyed by their IPv4
// address, a 6to4 site by its /48). What it was:
//
// An IPv4 client that reaches an IPv6-only node through a stateless
// IPv4/IPv6 translator (SIIT-DC, RFC 7755; NAT64/SIIT with the well-known
// prefix 64:ff9b::/96 of RFC 6052, or the local-use 64:ff9b:1::/48 of
// RFC 8215) arrives from 64:ff9b::a.b.c.d: the client is the embedded
// IPv4 address in the low 32 bits. Of keys it by its /64, 64:ff9b::/64,
// so every IPv4 client on the Internet is one client: one
// limits.max_connections_per_client, one max_inflight_per_client and one
// limits.rate bucket for all of them (clientaddr.go:34-38). The docs say a
// client is "an IPv4 address or an IPv6 /64" and the package test says
// "IPv4 is never grouped". Fix: key an address in 64:ff9b::/96 (and
// 64:ff9b:1::/48's RFC 6052 /96 forms) by its embedded IPv4 address, as
// an IPv4-mapped one is.
func TestS13ClientTranslatedIPv4ClientsAreNotOneClient(t *testing.T) {
	a := netip.MustParseAddr("64:ff9b::192.0.2.7")    // IPv4 client 192.0.2.7, translated
	b := netip.MustParseAddr("64:ff9b::198.51.100.9") // another, unrelated IPv4 client
	if Of(a) == Of(b) {
		t.Errorf("two unrelated IPv4 clients through a translator share one key %v (every IPv4 client is one client)", Of(a))
	}
	if got := OfRemote("[64:ff9b::192.0.2.7]:443"); got != "192.0.2.7" && got == OfRemote("[64:ff9b::198.51.100.9]:443") {
		t.Errorf("OfRemote keys both translated IPv4 clients %q", got)
	}
}
