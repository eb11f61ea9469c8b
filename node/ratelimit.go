package node

import (
	"math"
	"net"
	"net/http"
	"strconv"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"
	"golang.org/x/time/rate"

	"github.com/edgecache/edge/config"
)

// rateBuckets bounds the clients a site's limiter remembers: a token
// bucket is ~100 bytes, so a flood from many addresses costs at most a
// few MiB, and a forgotten client starts again with a full burst.
const rateBuckets = 100_000

// rateLimiter is a site's per-client request rate (limits.rate, a site's
// rate_limit): a token bucket per client address, or per value of a
// header (requests without it share their address's bucket).
type rateLimiter struct {
	limit   rate.Limit
	burst   int
	header  string // "" keys on the address
	retry   string // Retry-After of a refusal: the time one token takes
	buckets *lru.Cache[string, *rate.Limiter]
}

// newRateLimiter returns the limiter of rl, or nil when rl is off.
func newRateLimiter(rl config.RateLimit) *rateLimiter {
	if rl.Rate <= 0 {
		return nil
	}
	buckets, _ := lru.New[string, *rate.Limiter](rateBuckets)
	l := &rateLimiter{limit: rate.Limit(rl.Rate), burst: rl.Burst, buckets: buckets,
		retry: strconv.Itoa(int(math.Max(1, math.Ceil(1/rl.Rate))))}
	if name, ok := cutHeaderKey(rl.Key); ok {
		l.header = http.CanonicalHeaderKey(name)
	}
	return l
}

func cutHeaderKey(key string) (string, bool) {
	const p = "header:"
	if len(key) > len(p) && key[:len(p)] == p {
		return key[len(p):], true
	}
	return "", false
}

// clientKey names the client of a request: its header value, or its
// address without the port.
func (l *rateLimiter) clientKey(remote string, header http.Header) string {
	if l.header != "" {
		if v := header.Get(l.header); v != "" {
			return "h " + v
		}
	}
	if host, _, err := net.SplitHostPort(remote); err == nil {
		return host
	}
	return remote
}

func (l *rateLimiter) bucket(client string) *rate.Limiter {
	if b, ok := l.buckets.Get(client); ok {
		return b
	}
	b := rate.NewLimiter(l.limit, l.burst)
	// Two first requests of one client may both make a bucket; one wins,
	// which at worst grants that client one extra burst.
	if prev, ok, _ := l.buckets.PeekOrAdd(client, b); ok {
		return prev
	}
	return b
}

// allow takes a token of client's bucket, reporting false when it has
// none.
func (l *rateLimiter) allow(client string, now time.Time) bool {
	return l.bucket(client).AllowN(now, 1)
}

// has reports whether client has a token, without taking it (the hit
// path checks first and takes one only for a request it answers).
func (l *rateLimiter) has(client string, now time.Time) bool {
	return l.bucket(client).TokensAt(now) >= 1
}

// tooMany answers a refused request: 429 with the time one token takes
// to come back.
func (l *rateLimiter) tooMany(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Retry-After", l.retry)
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(http.StatusTooManyRequests)
	_, _ = w.Write([]byte("too many requests from this client\n"))
}
