package proxy

import (
	"net/netip"
	"strings"
)

// CanonicalHost returns a Host field (or a URL's authority) as the edge
// knows the host everywhere: site lookup, the cache key, purge and the
// access log all call it, so that no spelling of a host reaches a site
// under a key that a purge of the plain spelling misses.
//
// The canonical form is lower case, without a port (the port a node
// listens on never splits the cache: every node of a cluster computes the
// same key, and the edge forwards no port the key does not see), without a
// trailing dot, and an IPv6 literal in brackets in its RFC 5952 form. ok
// is false for what is not a host: a non-numeric or out-of-range port,
// brackets around a name, a bare IPv6 literal, an empty label, bytes a
// registered name cannot hold. An empty Host (HTTP/1.0) stays empty.
//
// A host already in canonical form is returned as is, without allocating.
func CanonicalHost(hostport string) (host string, ok bool) {
	host, upper, ok := canonicalHost(hostport)
	if upper {
		host = strings.ToLower(host)
	}
	return host, ok
}

// canonicalHost is CanonicalHost without the lower-casing, which it
// reports instead (CacheKey lower-cases as it copies, without a second
// allocation).
func canonicalHost(hostport string) (host string, upper, ok bool) {
	if hostport == "" {
		return "", false, true
	}
	if hostport[0] == '[' {
		end := strings.IndexByte(hostport, ']')
		if end < 0 || !validPort(hostport[end+1:]) {
			return "", false, false
		}
		addr, err := netip.ParseAddr(hostport[1:end])
		if err != nil || !addr.Is6() || addr.Zone() != "" {
			return "", false, false
		}
		if s := "[" + addr.String() + "]"; s != hostport[:end+1] {
			return s, false, true
		}
		return hostport[:end+1], false, true
	}
	host = hostport
	if i := strings.IndexByte(hostport, ':'); i >= 0 {
		if !validPort(hostport[i:]) {
			return "", false, false // also a bare IPv6 literal: a second colon is no port
		}
		host = hostport[:i]
	}
	host = strings.TrimSuffix(host, ".")
	prev := byte('.')
	for i := 0; i < len(host); i++ {
		c := host[i]
		switch {
		case 'a' <= c && c <= 'z', '0' <= c && c <= '9', c == '-', c == '_', c == '~':
		case 'A' <= c && c <= 'Z':
			upper = true
		case c == '.':
			if prev == '.' {
				return "", false, false // an empty label (or a leading dot)
			}
		default:
			return "", false, false
		}
		prev = c
	}
	if host == "" || prev == '.' {
		return "", false, false // no name, or a second trailing dot
	}
	return host, upper, true
}

// validPort reports whether s is "" or ":" followed by a port number (RFC
// 3986 allows an empty one).
func validPort(s string) bool {
	if s == "" {
		return true
	}
	if s[0] != ':' || len(s) > 6 {
		return false
	}
	n := 0
	for i := 1; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return false
		}
		n = n*10 + int(c-'0')
	}
	return n <= 65535
}
