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
	if hostport == "" {
		return "", true
	}
	if hostport[0] == '[' {
		end := strings.IndexByte(hostport, ']')
		if end < 0 || !validPort(hostport[end+1:]) {
			return "", false
		}
		addr, err := netip.ParseAddr(hostport[1:end])
		if err != nil || !addr.Is6() || addr.Zone() != "" {
			return "", false
		}
		s := "[" + addr.String() + "]"
		if s == hostport {
			return hostport, true
		}
		return s, true
	}
	host = hostport
	if i := strings.IndexByte(hostport, ':'); i >= 0 {
		if !validPort(hostport[i:]) {
			return "", false // also a bare IPv6 literal: a second colon is no port
		}
		host = hostport[:i]
	}
	host = strings.TrimSuffix(host, ".")
	upper := false
	prev := byte('.')
	for i := 0; i < len(host); i++ {
		c := host[i]
		switch {
		case 'a' <= c && c <= 'z', '0' <= c && c <= '9', c == '-', c == '_', c == '~':
		case 'A' <= c && c <= 'Z':
			upper = true
		case c == '.':
			if prev == '.' {
				return "", false // an empty label (or a leading dot)
			}
		default:
			return "", false
		}
		prev = c
	}
	if host == "" || prev == '.' {
		return "", false // no name, or a second trailing dot
	}
	if upper {
		host = strings.ToLower(host)
	}
	return host, true
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
