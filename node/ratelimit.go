package node

import (
	"crypto/sha256"
	"encoding/hex"
	"math"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"
	"golang.org/x/time/rate"

	"github.com/edgecache/edge/config"
	"github.com/edgecache/edge/internal/clientaddr"
)

// rateBuckets bounds the clients a site's limiter remembers: a bucket and
// its key are about 150 bytes, so a flood of clients costs at most a few
// tens of MiB, and a forgotten client starts again with a full burst.
const rateBuckets = 100_000

// addressShare is how much more than the limit one address may send when
// the limit is keyed on a header: the header's values are whatever the
// client writes, so a client inventing values gets at most this many
// times the limit, while many honest users behind one NAT address keep
// theirs.
const addressShare = 10

// rateLimiter is a site's per-client request rate (limits.rate, a site's
// rate_limit): a token bucket per client (clientaddr: an IPv4 address, an
// IPv6 /64), or per value of a header (requests without it share their
// client's bucket), each address also held to addressShare times the
// limit, but for X-Forwarded-For written by a trusted proxy.
type rateLimiter struct {
	limit   rate.Limit
	burst   int
	header  string // "" keys on the address
	retry   string // Retry-After of a refusal: the time one token takes
	buckets *lru.Cache[string, *rate.Limiter]
	perAddr *lru.Cache[string, *rate.Limiter] // header mode: each address's share
	// trusted is forwarding.trusted_proxies: a balancer there writes the
	// X-Forwarded-For hop the limiter keys on, so its own address stands
	// for all its users and is not held to one address's share.
	trusted []netip.Prefix
}

// newRateLimiter returns the limiter of rl, or nil when rl is off;
// trusted is forwarding.trusted_proxies.
func newRateLimiter(rl config.RateLimit, trusted []netip.Prefix) *rateLimiter {
	if !(rl.Rate > 0) || math.IsInf(rl.Rate, 0) {
		return nil
	}
	buckets, _ := lru.New[string, *rate.Limiter](rateBuckets)
	l := &rateLimiter{limit: rate.Limit(rl.Rate), burst: max(rl.Burst, 1), buckets: buckets,
		retry: strconv.Itoa(int(math.Min(3600, math.Max(1, math.Ceil(1/rl.Rate)))))}
	if name, ok := strings.CutPrefix(rl.Key, "header:"); ok && name != "" {
		l.header = http.CanonicalHeaderKey(name)
		l.perAddr, _ = lru.New[string, *rate.Limiter](rateBuckets)
		if l.header == "X-Forwarded-For" {
			l.trusted = trusted
		}
	}
	return l
}

// client is who a request counts against: its address (its clientaddr
// key), and in header mode the header's value (hashed, so that a key's
// size is bounded whatever the client sends; of X-Forwarded-For, the last
// hop, the one the balancer in front added, keyed as an address is).
// unshared: the address is a trusted proxy's, held to no share.
type client struct {
	addr, key string
	unshared  bool
}

func (l *rateLimiter) clientOf(remote string, header http.Header) client {
	c := client{addr: clientaddr.OfRemote(remote)}
	c.key = c.addr
	if l.header != "" && header != nil {
		v := strings.Join(header[l.header], ",")
		if l.header == "X-Forwarded-For" {
			if i := strings.LastIndexByte(v, ','); i >= 0 {
				v = v[i+1:]
			}
			if v = strings.TrimSpace(v); v != "" {
				v = clientaddr.OfRemote(v) // one client's addresses, ports and spellings: one bucket
			}
			c.unshared = v != "" && clientaddr.In(remote, l.trusted)
		}
		if v != "" {
			sum := sha256.Sum256([]byte(v))
			c.key = "h" + hex.EncodeToString(sum[:12])
		}
	}
	return c
}

func bucket(cache *lru.Cache[string, *rate.Limiter], key string, limit rate.Limit, burst int) *rate.Limiter {
	if b, ok := cache.Get(key); ok {
		return b
	}
	b := rate.NewLimiter(limit, burst)
	// Two first requests of one client may both make a bucket; one wins,
	// which at worst grants that client one extra burst.
	if prev, ok, _ := cache.PeekOrAdd(key, b); ok {
		return prev
	}
	return b
}

// take takes a token for c, reporting false (and taking nothing) when
// there is none now. undo gives the token back: the hit path takes one
// before it knows whether it will answer, and gives it back when it
// hands the request on to the front that takes its own.
func (l *rateLimiter) take(c client, now time.Time) (undo func(), ok bool) {
	r := bucket(l.buckets, c.key, l.limit, l.burst).ReserveN(now, 1)
	if !r.OK() || r.DelayFrom(now) > 0 {
		r.CancelAt(now)
		return nil, false
	}
	if l.perAddr == nil || c.key == c.addr || c.unshared {
		return func() { r.CancelAt(now) }, true
	}
	a := bucket(l.perAddr, c.addr, l.limit*addressShare, l.burst*addressShare).ReserveN(now, 1)
	if !a.OK() || a.DelayFrom(now) > 0 {
		a.CancelAt(now)
		r.CancelAt(now)
		return nil, false
	}
	return func() { a.CancelAt(now); r.CancelAt(now) }, true
}

// allow takes a token for c, reporting whether there was one.
func (l *rateLimiter) allow(c client, now time.Time) bool {
	_, ok := l.take(c, now)
	return ok
}

// tooMany answers a refused request: 429 with the time one token takes
// to come back.
func (l *rateLimiter) tooMany(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Retry-After", l.retry)
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(http.StatusTooManyRequests)
	_, _ = w.Write([]byte("too many requests from this client\n"))
}
