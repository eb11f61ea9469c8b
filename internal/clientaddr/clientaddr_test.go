package clientaddr

import (
	"net/netip"
	"strings"
	"testing"
)

func TestOfRemote(t *testing.T) {
	cases := []struct{ in, want string }{
		{"192.0.2.1:443", "192.0.2.1"},
		{"192.0.2.1", "192.0.2.1"},
		{"[::ffff:192.0.2.1]:80", "192.0.2.1"}, // a dual-stack socket's IPv4 client
		{"[2001:db8:1:2:3:4:5:6]:443", "2001:db8:1:2::/64"},
		{"[2001:db8:1:2:ffff::1]:1", "2001:db8:1:2::/64"}, // the same client: its /64
		{"2001:db8:1:3::1", "2001:db8:1:3::/64"},          // bare, another /64
		{"[fe80::1%eth0]:80", "fe80::/64"},                // the zone is not the client
		{"[::1]:8080", "::/64"},
		// IPv6 addresses that stand for an IPv4 client: its IPv4 address.
		{"[64:ff9b::c000:201]:80", "192.0.2.1"},                     // NAT64's well-known prefix
		{"[64:ff9b::198.51.100.7]:80", "198.51.100.7"},              // the same, written dotted
		{"[64:ff9b:1::c000:201]:80", "64:ff9b:1::/64"},              // a network-specific prefix: any IPv6
		{"[2001:0:4136:e378:8000:63bf:3fff:fdd2]:80", "192.0.2.45"}, // Teredo (RFC 4380's example)
		{"[2002:c000:201:7::1]:80", "2002:c000:201::/48"},           // 6to4: the site of 192.0.2.1
		// Not an IP address: the input is its own key, so that a bound still
		// holds for it.
		{"pipe", "pipe"},
		{"", NoHost},
		{":80", NoHost},
		{"[]:80", NoHost},
		{"example.com:80", "example.com"},
		{"[::1", "[::1"},
		{"1.2.3.4.5:80", "1.2.3.4.5"},
		{"[2001:db8::1]:x", "2001:db8::/64"}, // SplitHostPort does not check the port
	}
	for _, c := range cases {
		if got := OfRemote(c.in); got != c.want {
			t.Errorf("OfRemote(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

func TestOfKeysOneClientOnce(t *testing.T) {
	same := [][2]string{
		{"2001:db8::1", "2001:db8::ffff:ffff:ffff:ffff"},
		{"192.0.2.7", "::ffff:192.0.2.7"},
		{"fe80::1%eth0", "fe80::2%eth1"},
	}
	for _, s := range same {
		a, b := netip.MustParseAddr(s[0]), netip.MustParseAddr(s[1])
		if Of(a) != Of(b) {
			t.Errorf("%s and %s are one client: %v, %v", a, b, Of(a), Of(b))
		}
	}
	apart := [][2]string{
		{"2001:db8::1", "2001:db8:0:1::1"}, // neighbouring /64s
		{"192.0.2.7", "192.0.2.8"},         // IPv4 is never grouped: NAT already shares it
		{"::ffff:192.0.2.7", "::ffff:192.0.2.8"},
		{"192.0.2.7", "::c000:207"}, // an IPv4-compatible address is IPv6 (deprecated)
	}
	for _, s := range apart {
		a, b := netip.MustParseAddr(s[0]), netip.MustParseAddr(s[1])
		if Of(a) == Of(b) {
			t.Errorf("%s and %s are two clients, both keyed %v", a, b, Of(a))
		}
	}
	if Of(netip.Addr{}) != (netip.Prefix{}) {
		t.Error("the zero address has a key other than the zero prefix")
	}
}

// FuzzOfRemote: any remote address string gets a key without a panic; a
// key is stable (its own key again where it is an address) and never
// longer than its input allows, and an IPv6 key is a /64.
func FuzzOfRemote(f *testing.F) {
	for _, s := range []string{"192.0.2.1:443", "[2001:db8::1]:80", "[::ffff:1.2.3.4]:1", "[fe80::1%eth0]:80", "pipe", "", "[::1", ":80", "[]:80"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, remote string) {
		k := OfRemote(remote)
		if k != OfRemote(remote) {
			t.Fatalf("OfRemote(%q) not stable", remote)
		}
		if p, err := netip.ParsePrefix(k); err == nil {
			sixToFourSite := p.Bits() == 48 && sixToFour.Contains(p.Addr())
			if !p.Addr().Is6() || (p.Bits() != 64 && !sixToFourSite) || p.Masked() != p {
				t.Fatalf("OfRemote(%q) = %q: a prefix key that is not an IPv6 /64 (or a 6to4 /48)", remote, k)
			}
			return
		}
		if a, err := netip.ParseAddr(k); err == nil {
			if !a.Is4() {
				t.Fatalf("OfRemote(%q) = %q: a bare address key that is not IPv4", remote, k)
			}
			if OfRemote(k) != k {
				t.Fatalf("OfRemote(%q) = %q, whose own key is %q", remote, k, OfRemote(k))
			}
			return
		}
		if k == "" {
			t.Fatalf("OfRemote(%q) is empty, which callers take for no slot held", remote)
		}
		if k != NoHost && !strings.Contains(remote, k) {
			t.Fatalf("OfRemote(%q) = %q: an opaque key that is not part of its input", remote, k)
		}
	})
}

func TestIn(t *testing.T) {
	trusted := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("2001:db8::/32"), netip.MustParsePrefix("fe80::/10")}
	for _, c := range []struct {
		remote string
		want   bool
	}{
		{"10.1.2.3:443", true}, {"10.1.2.3", true}, {"[::ffff:10.1.2.3]:80", true},
		{"[2001:db8::7]:80", true}, {"2001:db8::7", true},
		{"11.0.0.1:80", false}, {"[2001:db9::1]:80", false},
		{"[fe80::1%eth0]:80", false}, // a zoned address is in no prefix (netip)
		{"pipe", false}, {"", false}, {":80", false},
	} {
		if got := In(c.remote, trusted); got != c.want {
			t.Errorf("In(%q) = %v, want %v", c.remote, got, c.want)
		}
	}
	if In("10.1.2.3:1", nil) {
		t.Error("an address in no prefixes at all")
	}
}
