package node

import (
	"fmt"
	"net/http"
	"net/netip"
	"testing"
	"time"

	"github.com/edgecache/edge/config"
)

func s13XFF(v string) http.Header { return http.Header{"X-Forwarded-For": {"198.51.100.1, " + v}} }

// TestS13ClientRateAddressModeKeysOneClientOnce checked (holds): in
// address mode one bucket serves an IPv4 client however its address is
// spelt (plain, IPv4-mapped dotted or hex, bare) and an IPv6 client over
// its whole /64 in any spelling (uppercase, written-out zeros, zone);
// neighbouring IPv4 addresses and neighbouring /64s have their own; in
// header mode, requests without the header share their /64's bucket, and
// a client inventing values is held to the address share per /64 (not per
// address).
func TestS13ClientRateAddressModeKeysOneClientOnce(t *testing.T) {
	now := time.Now()
	l := newRateLimiter(config.RateLimit{Rate: 1, Burst: 1, Key: "address"}, nil)
	for _, g := range [][]string{
		{"192.0.2.1:1", "[::ffff:192.0.2.1]:2", "[::FFFF:C000:0201]:3", "192.0.2.1"},
		{"[2001:db8:1:2::1]:1", "[2001:DB8:1:2::ABCD]:2", "[2001:0db8:0001:0002:0:0:0:9]:3", "[2001:db8:1:2::5%eth0]:4", "2001:db8:1:2::6"},
	} {
		if !l.allow(l.clientOf(g[0], nil), now) {
			t.Fatalf("%s: first request refused", g[0])
		}
		for _, s := range g[1:] {
			if l.allow(l.clientOf(s, nil), now) {
				t.Errorf("%s got a bucket apart from %s", s, g[0])
			}
		}
	}
	for _, s := range []string{"192.0.2.2:1", "[2001:db8:1:3::1]:1", "[2001:db8:1:1::1]:1"} {
		if !l.allow(l.clientOf(s, nil), now) {
			t.Errorf("%s shares a bucket it should not", s)
		}
	}

	h := newRateLimiter(config.RateLimit{Rate: 1, Burst: 1, Key: "header:X-Api-Key"}, nil)
	if !h.allow(h.clientOf("[2001:db8:9:9::1]:1", http.Header{}), now) {
		t.Fatal("header mode: the first request without the header refused")
	}
	if h.allow(h.clientOf("[2001:db8:9:9::2]:1", http.Header{}), now) {
		t.Error("header mode: a request without the header from the same /64 got a bucket of its own")
	}
	// Invented key values, each from another address of one /64: the
	// share (10 × burst 1 = 10) is the /64's.
	allowed := 0
	for i := range 30 {
		c := h.clientOf(fmt.Sprintf("[2001:db8:7:7::%x]:1", i+1), http.Header{"X-Api-Key": {fmt.Sprint("k", i)}})
		if h.allow(c, now) {
			allowed++
		}
	}
	if allowed != addressShare {
		t.Errorf("invented keys over one /64: %d allowed, want the share %d", allowed, addressShare)
	}
}

// TestS13ClientRateForwardedForKeysAnIPv6ClientByItsAddress — a defect this
// review found, now mended (clientOf keys the last hop through
// clientaddr.OfRemote before hashing). What it was:
//
// limits.rate_key header:X-Forwarded-For is what docs/rules.md tells an
// operator behind a load balancer to use; its value (the last hop, which
// clientOf already singles out as the balancer's) is the client's address.
// clientOf hashes that value whole (node/ratelimit.go:65-81), so the /64
// rule of internal/clientaddr does not reach it: an IPv6 client behind the
// balancer gets a fresh bucket from every address of its /64 (and a
// balancer that writes a port, as some do, gives one per connection),
// which is exactly the spread the commit set out to stop. Fix: in
// header:X-Forwarded-For mode key the last hop through
// clientaddr.OfRemote (which also strips a port and folds IPv4-mapped
// spellings) before hashing.
func TestS13ClientRateForwardedForKeysAnIPv6ClientByItsAddress(t *testing.T) {
	now := time.Now()
	l := newRateLimiter(config.RateLimit{Rate: 1, Burst: 1, Key: "header:X-Forwarded-For"}, nil)
	const lb = "10.0.0.1:5000" // the balancer
	if !l.allow(l.clientOf(lb, s13XFF("2001:db8:1:2::1")), now) {
		t.Fatal("the first request refused")
	}
	for _, v := range []string{"2001:db8:1:2::2", "2001:db8:1:2:ffff::9", "[2001:db8:1:2::1]:4444"} {
		if l.allow(l.clientOf(lb, s13XFF(v)), now) {
			t.Errorf("X-Forwarded-For %s (the same /64 as 2001:db8:1:2::1) got a bucket of its own", v)
		}
	}
	if !l.allow(l.clientOf(lb, s13XFF("192.0.2.1:1000")), now) {
		t.Fatal("an IPv4 client's first request refused")
	}
	if l.allow(l.clientOf(lb, s13XFF("192.0.2.1:1001")), now) {
		t.Error("X-Forwarded-For 192.0.2.1 with another port got a bucket of its own")
	}
}

// TestS13ClientRateForwardedForClientsShareTheBalancersShare: behind a
// load balancer with rate_key header:X-Forwarded-For (the setup
// docs/rules.md recommends), every request's connection address is the
// balancer's. take() also charged each request to that address's share,
// 10 × the limit, so all the site's users together got 10 × one client's
// rate (found by this review; older than the /64 keying). A balancer in
// forwarding.trusted_proxies now writes the hop the limiter keys on and is
// held to no share; from any other address the share still holds, since
// there a client writes the header and could invent a value per request.
func TestS13ClientRateForwardedForClientsShareTheBalancersShare(t *testing.T) {
	now := time.Now()
	trusted := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}
	l := newRateLimiter(config.RateLimit{Rate: 1, Burst: 1, Key: "header:X-Forwarded-For"}, trusted)
	refused := 0
	for i := range 20 {
		if !l.allow(l.clientOf("10.0.0.1:5000", s13XFF(fmt.Sprintf("203.0.113.%d", i+1))), now) {
			refused++
		}
	}
	if refused > 0 {
		t.Errorf("%d of 20 distinct clients behind one trusted balancer refused their first request (burst 1 each): they share the balancer's 10× share", refused)
	}
	if l.allow(l.clientOf("10.0.0.1:5001", s13XFF("203.0.113.1")), now) {
		t.Error("a client behind the trusted balancer got a second request past its own burst of 1")
	}
	// The same from an address that is not a trusted proxy: a client
	// inventing a value per request still gets at most 10 × the limit.
	direct := 0
	for i := range 20 {
		if l.allow(l.clientOf("198.51.100.9:5000", s13XFF(fmt.Sprintf("203.0.113.%d", 100+i))), now) {
			direct++
		}
	}
	if direct != 10 {
		t.Errorf("an untrusted address inventing 20 X-Forwarded-For values got %d requests through, want the share of 10", direct)
	}
}
