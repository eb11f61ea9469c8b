package clientaddr

import (
	"net"
	"net/netip"
	"strings"
	"testing"
)

// TestS13ClientSpellingsOfOneClientShareAKey checked (holds): every
// spelling of one address a socket or a crafted RemoteAddr can give —
// uppercase hex, zero runs written out, an IPv4-mapped address in dotted
// or hex form, with or without a zone, bare or host:port, the same /64
// reached through another interface identifier — is one key; and what
// net.TCPAddr.String() gives for a dual-stack socket's IPv4 client (a
// 16-byte IP) is the IPv4 key.
func TestS13ClientSpellingsOfOneClientShareAKey(t *testing.T) {
	groups := [][]string{
		{"192.0.2.1:443", "192.0.2.1", "[192.0.2.1]:80", "[::ffff:192.0.2.1]:1", "[::FFFF:C000:201]:2",
			"::ffff:192.0.2.1", "[::ffff:192.0.2.1%eth0]:3", "[0:0:0:0:0:ffff:c000:0201]:4"},
		{"[2001:db8:1:2::1]:1", "[2001:DB8:1:2::1]:1", "[2001:0db8:0001:0002:0000:0000:0000:0001]:9",
			"2001:db8:1:2::1", "[2001:db8:1:2::1%eth0]:1", "[2001:db8:1:2::1%25eth0]:1",
			"[2001:db8:1:2:ffff:ffff:ffff:ffff]:65535", "[2001:db8:1:2::c000:201]:1"},
	}
	for _, g := range groups {
		want := OfRemote(g[0])
		for _, s := range g[1:] {
			if got := OfRemote(s); got != want {
				t.Errorf("OfRemote(%q) = %q, want %q (as %q)", s, got, want, g[0])
			}
		}
	}
	// What the sockets give.
	v4in16 := &net.TCPAddr{IP: net.ParseIP("192.0.2.1"), Port: 5} // 16-byte form
	if got := OfRemote(v4in16.String()); got != "192.0.2.1" {
		t.Errorf("TCPAddr(16-byte IPv4).String() keyed %q", got)
	}
	if got := Of(v4in16.AddrPort().Addr()); got != netip.MustParsePrefix("192.0.2.1/32") {
		t.Errorf("Of(TCPAddr(16-byte IPv4)) = %v", got)
	}
	zoned := &net.UDPAddr{IP: net.ParseIP("fe80::1"), Zone: "eth0", Port: 443}
	if got, want := Of(zoned.AddrPort().Addr()), netip.MustParsePrefix("fe80::/64"); got != want {
		t.Errorf("Of(zoned UDP) = %v, want %v", got, want)
	}
	// Of and OfRemote agree for every key a connection limiter and the
	// request limiters make of one socket address.
	for _, s := range []string{"192.0.2.1", "::ffff:192.0.2.1", "2001:db8::1", "fe80::1%eth0", "::1"} {
		a := netip.MustParseAddr(s)
		p := Of(a)
		k := p.String()
		if p.Addr().Is4() {
			k = p.Addr().String()
		}
		if r := OfRemote(netip.AddrPortFrom(a, 80).String()); r != k {
			t.Errorf("%s: Of %q, OfRemote %q", s, k, r)
		}
	}
}

// TestS13ClientUnrelatedClientsDoNotCollide checked (holds): IPv4 keys
// never equal IPv6 keys (a /64 key always has a '/'), neighbouring IPv4
// addresses and neighbouring /64s are apart, and an IPv4 address is not
// the /64 that holds its IPv4-compatible spelling.
func TestS13ClientUnrelatedClientsDoNotCollide(t *testing.T) {
	keys := map[string]string{}
	for _, s := range []string{"0.0.0.0:1", "0.0.0.1:1", "192.0.2.1:1", "192.0.2.2:1", "255.255.255.255:1",
		"[::]:1", "[::1]:1" /* ::/64, once */, "[::1:0:0:0:1]:1", "[2001:db8::1]:1", "[2001:db8:0:1::1]:1",
		"[2001:db8:0:0:1::]:1" /* 2001:db8::/64 */} {
		k := OfRemote(s)
		if strings.Contains(s, "[") != strings.Contains(k, "/") {
			t.Errorf("OfRemote(%q) = %q: IPv4 and IPv6 keys must differ in form", s, k)
		}
		if prev, ok := keys[k]; ok {
			same := map[string]bool{"[::]:1|[::1]:1": true, "[2001:db8::1]:1|[2001:db8:0:0:1::]:1": true}
			if !same[prev+"|"+s] {
				t.Errorf("%q and %q share key %q", prev, s, k)
			}
		}
		keys[k] = s
	}
}
