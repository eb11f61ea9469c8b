package proxy

import (
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
)

func testEntry(key string, bodySize int) *Entry {
	e := &Entry{Key: key, Status: 200, Header: http.Header{"Cache-Control": {"max-age=60"}}, Body: make([]byte, bodySize), ResponseTime: t0, RequestTime: t0}
	e.computeSize()
	return e
}

func TestStoreEvictsLeastRecentlyUsed(t *testing.T) {
	s := NewStore(10_000, 4)
	for i := range 5 {
		s.Put(testEntry(fmt.Sprint(i), 1500))
	}
	s.Lookup("0", nil)          // touch 0 so that 1 is now the least recently used
	s.Put(testEntry("5", 1500)) // evicts the oldest not recently used: "1"
	st := s.Stats()
	if st.Bytes > 10_000 {
		t.Fatalf("bytes %d over budget", st.Bytes)
	}
	if e, _ := s.Lookup("0", nil); e == nil {
		t.Error("recently used key 0 was evicted")
	}
	if e, _ := s.Lookup("1", nil); e != nil {
		t.Error("least recently used key 1 survived")
	}
	if st.Evictions == 0 {
		t.Error("no eviction counted")
	}
}

func TestStoreRefusesObjectLargerThanBudget(t *testing.T) {
	s := NewStore(1000, 4)
	if s.Put(testEntry("big", 5000)) {
		t.Fatal("stored an entry larger than the budget")
	}
}

func TestStoreVariantCapAndVaryChange(t *testing.T) {
	s := NewStore(1<<20, 2)
	for _, lang := range []string{"en", "fr", "de"} {
		e := testEntry("k", 10)
		e.VaryNames = []string{"accept-language"}
		e.VaryKey = VaryKey(e.VaryNames, http.Header{"Accept-Language": {lang}})
		s.Put(e)
	}
	if got := s.Stats().Objects; got != 2 {
		t.Fatalf("variants = %d, want the cap 2", got)
	}
	s.Put(testEntry("k", 10)) // the URL no longer varies: variants are replaced
	if got := s.Stats().Objects; got != 1 {
		t.Fatalf("after Vary change: %d variants, want 1", got)
	}
	if e, _ := s.Lookup("k", nil); e == nil {
		t.Fatal("unvaried entry not found")
	}
}

// TestStoreBudgetUnderChurn fills a 64 MiB store with four times that
// volume of random-size objects and checks, after every insertion, that the
// byte count never exceeds the budget. It reports peak RSS.
func TestStoreBudgetUnderChurn(t *testing.T) {
	const budget = 64 << 20
	s := NewStore(budget, 8)
	rng := rand.New(rand.NewPCG(7, 8))
	var written int64
	var peak int64
	i := 0
	for written < 4*budget {
		size := 1 + rng.IntN(512<<10)
		if rng.IntN(10) == 0 {
			size = 1 + rng.IntN(4<<20)
		}
		e := testEntry("k"+strconv.Itoa(i), size)
		s.Put(e)
		written += int64(size)
		if b := s.Stats().Bytes; b > budget {
			t.Fatalf("after %d puts: %d bytes stored, budget %d", i, b, budget)
		} else if b > peak {
			peak = b
		}
		i++
	}
	runtime.GC()
	t.Logf("%d objects, %d MiB written, peak store %d MiB, final %d objects, evictions %d, peak RSS %s",
		i, written>>20, peak>>20, s.Stats().Objects, s.Stats().Evictions, peakRSS())
	if s.Stats().Evictions == 0 {
		t.Fatal("no evictions while writing 4× the budget")
	}
}

// peakRSS reads VmHWM (peak resident set) from /proc on Linux.
func peakRSS() string {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return "unknown"
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			return strings.TrimSpace(v)
		}
	}
	return "unknown"
}

func TestEntryAge(t *testing.T) {
	p := DefaultConfig().Policy
	e := &Entry{Status: 200, Header: http.Header{
		"Date": {t0.Add(-5 * time.Second).Format(http.TimeFormat)}, "Age": {"3"}, "Cache-Control": {"max-age=60"},
	}, RequestTime: t0.Add(-time.Second), ResponseTime: t0}
	p.finishEntry(e)
	// apparent age 5 s; corrected age 3 s + 1 s delay = 4 s; initial age is the larger.
	if got := e.Age(t0); got != 5*time.Second {
		t.Errorf("age at response = %v, want 5s", got)
	}
	if got := e.Age(t0.Add(10 * time.Second)); got != 15*time.Second {
		t.Errorf("age 10s later = %v, want 15s", got)
	}
}

func TestPurgeQueryRoundTrip(t *testing.T) {
	for _, p := range []PurgeRequest{{URL: "http://h/a?b=1&c=%20"}, {Prefix: "/dir/"}, {Tag: "t 1&x", Soft: true}} {
		if got := ParsePurgeQuery(mustQuery(t, p.Query())); got != p {
			t.Errorf("%+v came back as %+v", p, got)
		}
	}
	if !ParsePurgeQuery(mustQuery(t, "url=x&soft=true")).Soft || ParsePurgeQuery(mustQuery(t, "url=x&soft=0")).Soft {
		t.Error("soft=true and soft=0 misread")
	}
}

func mustQuery(t *testing.T, s string) url.Values {
	q, err := url.ParseQuery(s)
	if err != nil {
		t.Fatal(err)
	}
	return q
}
