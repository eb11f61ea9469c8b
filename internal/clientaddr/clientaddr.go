// Package clientaddr says who a client is for the per-client bounds
// (limits.max_connections_per_client, limits.max_inflight_per_client and
// limits.rate): an IPv4 address, or the /64 network of an IPv6 address.
//
// A whole IPv6 address does not name a client. One subscriber is given at
// least a /64 (RFC 6177, RIPE-690), and its hosts pick addresses inside it
// at will (temporary addresses, RFC 8981, change daily and on demand), so a
// bound per whole address is no bound at all for a client that spreads its
// connections over its own /64: 2^64 addresses, each with a bound of its
// own. The /64 is the smallest unit an ISP hands out and the one rate
// limiters in front of the web key IPv6 clients on. The same key serves
// every per-client bound, so that they count one client the same way.
//
// IPv6 addresses that stand for an IPv4 client are keyed by that IPv4
// address, since the /64 would put every such client together:
//   - IPv4-mapped (::ffff:a.b.c.d, what a dual-stack socket reports for an
//     IPv4 client);
//   - the NAT64 well-known prefix 64:ff9b::/96 (RFC 6052: a node behind a
//     stateless translator sees IPv4 clients so); a network-specific
//     prefix (64:ff9b:1::/48 and others) is the operator's choice of
//     length and is keyed as any IPv6 address;
//   - Teredo, 2001::/32 (RFC 4380: the client's public IPv4 address,
//     inverted, in the last 32 bits; its /64 is the Teredo server's).
//
// A 6to4 address, 2002::/16 (RFC 3056), is keyed by its /48: the site one
// IPv4 address stands for, which holds 65,536 /64s.
package clientaddr

import (
	"net"
	"net/netip"
)

// ipv6ClientBits is the prefix of an IPv6 address that names its client.
const ipv6ClientBits = 64

// Of is the client a (an IP address) belongs to: a single-address prefix
// for IPv4, the /64 for IPv6 (its zone dropped). The zero Addr gives the
// zero Prefix, one key for every connection whose address is unknown.
func Of(a netip.Addr) netip.Prefix {
	if !a.IsValid() {
		return netip.Prefix{}
	}
	a = a.Unmap().WithZone("")
	if a.Is4() {
		return netip.PrefixFrom(a, 32)
	}
	b := a.As16()
	switch {
	case nat64.Contains(a):
		return netip.PrefixFrom(netip.AddrFrom4([4]byte(b[12:])), 32)
	case teredo.Contains(a):
		return netip.PrefixFrom(netip.AddrFrom4([4]byte{^b[12], ^b[13], ^b[14], ^b[15]}), 32)
	case sixToFour.Contains(a):
		p, _ := a.Prefix(48)
		return p
	}
	p, _ := a.Prefix(ipv6ClientBits) // cannot fail: 64 ≤ 128 for an IPv6 address
	return p
}

// Prefixes whose addresses carry their client's IPv4 address (see the
// package comment).
var (
	nat64     = netip.MustParsePrefix("64:ff9b::/96")
	teredo    = netip.MustParsePrefix("2001::/32")
	sixToFour = netip.MustParsePrefix("2002::/16")
)

// NoHost is OfRemote's key for a remote address without a host (an
// unnamed Unix socket's "", ":80"): all such clients are one. It is never
// empty, since callers keep "" for "no slot held".
const NoHost = "-"

// OfRemote is the key of a client given as a "host:port" remote address
// (net/http's Request.RemoteAddr) or a bare IP: its Of as a string. A host
// that is not an IP address is its own key, unchanged, so that a bound
// still holds for it (a Unix socket's path, a test's "pipe"); no host at
// all is NoHost.
func OfRemote(remote string) string {
	host := remote
	if h, _, err := net.SplitHostPort(remote); err == nil {
		host = h
	}
	if host == "" {
		return NoHost
	}
	a, err := netip.ParseAddr(host)
	if err != nil {
		return host
	}
	p := Of(a)
	if p.Addr().Is4() {
		return p.Addr().String()
	}
	return p.String()
}

// In reports whether remote, a "host:port" remote address or a bare IP, is
// an address inside one of prefixes (an IPv4-mapped address as its IPv4
// one; an address with a zone is in none): forwarding.trusted_proxies'
// test, one for every field and bound that believes a proxy.
func In(remote string, prefixes []netip.Prefix) bool {
	if len(prefixes) == 0 {
		return false
	}
	host := remote
	if h, _, err := net.SplitHostPort(remote); err == nil {
		host = h
	}
	a, err := netip.ParseAddr(host)
	if err != nil {
		return false
	}
	a = a.Unmap()
	for _, p := range prefixes {
		if p.Contains(a) {
			return true
		}
	}
	return false
}
