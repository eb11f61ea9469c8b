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
// An IPv4-mapped IPv6 address (::ffff:a.b.c.d, what a dual-stack socket
// reports for an IPv4 client) is its IPv4 address.
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
	p, _ := a.Prefix(ipv6ClientBits) // cannot fail: 64 ≤ 128 for an IPv6 address
	return p
}

// OfRemote is the key of a client given as a "host:port" remote address
// (net/http's Request.RemoteAddr) or a bare IP: its Of as a string. What
// is neither is its own key, unchanged, so that a bound still holds for
// it (a Unix socket's address, a test's "pipe").
func OfRemote(remote string) string {
	host := remote
	if h, _, err := net.SplitHostPort(remote); err == nil {
		host = h
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
