package node

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/edgecache/edge/config"
)

func TestRateLimiterBurstThenRefill(t *testing.T) {
	l := newRateLimiter(config.RateLimit{Rate: 10, Burst: 3, Key: "address"}, nil)
	c := l.clientOf("10.0.0.1:1234", nil)
	now := time.Now()
	for i := range 3 {
		if !l.allow(c, now) {
			t.Fatalf("request %d of the burst refused", i)
		}
	}
	if l.allow(c, now) {
		t.Fatal("a fourth request within the burst of 3 allowed")
	}
	if other := l.clientOf("10.0.0.2:1", nil); !l.allow(other, now) {
		t.Fatal("another address shares the bucket")
	}
	if !l.allow(c, now.Add(110*time.Millisecond)) {
		t.Fatal("no token back after a tenth of a second at 10/s")
	}
}

// TestRateHitPathTakesBeforeItAnswers: the hit path takes the token
// before it answers and gives it back when it does not, so two hits on
// two connections cannot both spend the last token (a hostile review
// found has-then-take), and a declined hit costs nothing.
func TestRateHitPathTakesBeforeItAnswers(t *testing.T) {
	l := newRateLimiter(config.RateLimit{Rate: 1, Burst: 1, Key: "address"}, nil)
	now := time.Now()
	c := l.clientOf("10.0.0.1:1234", nil)
	undo, ok := l.take(c, now)
	if !ok {
		t.Fatal("the first take failed")
	}
	if _, ok := l.take(c, now); ok {
		t.Fatal("burst 1 gave two tokens")
	}
	undo() // the hit path declined: the token is back for the net/http front
	if !l.allow(c, now) {
		t.Fatal("the token given back is not there")
	}
}

// TestRateHeaderKeysAreBoundedAndCapped: header values are hashed (a
// client's key costs a fixed size whatever it sends), and a client that
// invents values gets at most addressShare times the limit.
func TestRateHeaderKeysAreBoundedAndCapped(t *testing.T) {
	l := newRateLimiter(config.RateLimit{Rate: 1, Burst: 1, Key: "header:X-Api-Key"}, nil)
	now := time.Now()
	ok := 0
	for i := range 100 {
		h := http.Header{"X-Api-Key": {fmt.Sprint("made-up-", i)}}
		if l.allow(l.clientOf("10.0.0.1:1", h), now) {
			ok++
		}
	}
	if ok != addressShare {
		t.Errorf("one address inventing keys: %d of 100 allowed, want %d (its share)", ok, addressShare)
	}
	var m0, m1 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&m0)
	big := strings.Repeat("k", 30<<10)
	for i := range 2000 {
		l.allow(l.clientOf(fmt.Sprintf("10.1.%d.%d:1", i/250, i%250), http.Header{"X-Api-Key": {big + fmt.Sprint(i)}}), now)
	}
	runtime.GC()
	runtime.ReadMemStats(&m1)
	runtime.KeepAlive(l)
	if grew := int64(m1.HeapAlloc) - int64(m0.HeapAlloc); grew > 4<<20 {
		t.Errorf("2000 clients with 30 KiB keys retain %d MiB", grew>>20)
	}
	// Of X-Forwarded-For, the hop the balancer added counts.
	xff := newRateLimiter(config.RateLimit{Rate: 1, Burst: 1, Key: "header:X-Forwarded-For"}, nil)
	a := xff.clientOf("10.0.0.9:1", http.Header{"X-Forwarded-For": {"1.1.1.1, 203.0.113.7"}})
	b := xff.clientOf("10.0.0.9:1", http.Header{"X-Forwarded-For": {"9.9.9.9, 203.0.113.7"}})
	if a != b {
		t.Error("a client-written X-Forwarded-For value changed the key")
	}
}

func TestRateLimitOddValuesRefused(t *testing.T) {
	site := "sites:\n  - name: s\n    hosts: [a.test]\n    origins: [\"http://127.0.0.1:1\"]\n"
	for _, v := range []string{".nan", "1e-300", "0.0000000001", ".inf", "-1"} {
		if _, err := config.LoadBytes([]byte(site + "    rate_limit: {rate: " + v + "}\n")); err == nil {
			t.Errorf("rate %s accepted", v)
		}
	}
	l := newRateLimiter(config.RateLimit{Rate: 0.001, Burst: 1, Key: "address"}, nil)
	w := httptest.NewRecorder()
	l.tooMany(w, nil)
	if ra := w.Header().Get("Retry-After"); ra != "1000" {
		t.Errorf("Retry-After %q at 0.001/s", ra)
	}
}

// TestRateLimiterCountsAnIPv6ClientByItsNetwork: the addresses of one /64
// share a bucket; the next /64 has its own.
func TestRateLimiterCountsAnIPv6ClientByItsNetwork(t *testing.T) {
	l := newRateLimiter(config.RateLimit{Rate: 1, Burst: 1, Key: "address"}, nil)
	now := time.Now()
	if !l.allow(l.clientOf("[2001:db8:1:2::1]:1000", nil), now) {
		t.Fatal("the first request refused")
	}
	if l.allow(l.clientOf("[2001:db8:1:2:dead:beef::1]:1001", nil), now) {
		t.Fatal("another address of the same /64 got a bucket of its own")
	}
	if !l.allow(l.clientOf("[2001:db8:1:3::1]:1002", nil), now) {
		t.Fatal("the next /64 shares the bucket")
	}
}
