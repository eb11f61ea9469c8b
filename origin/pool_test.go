package origin

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func poolOf(t *testing.T, balance string, urls ...string) *Pool {
	t.Helper()
	var ocs []ClientConfig
	for _, u := range urls {
		ocs = append(ocs, ClientConfig{URL: u, ConnectTimeout: time.Second, ResponseTimeout: 2 * time.Second, MaxIdleConns: 4, IdleConnTimeout: time.Minute})
	}
	p, err := NewPool(PoolConfig{Site: "s", Origins: ocs, Balance: balance, Metrics: NewPoolMetrics(prometheus.NewRegistry()), BaseEject: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Stop)
	return p
}

func counting(status *atomic.Int32, n *atomic.Int64) *httptest.Server {
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		w.WriteHeader(int(status.Load()))
	}))
}

func fetchPath(t *testing.T, p *Pool, path string) int {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, path, nil)
	resp, err := p.Fetch(context.Background(), req)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestPoolEjectsRetriesAndReturns: a failing origin (503) is retried on the
// other one (no client failure), ejected after three failures in a row,
// and back in rotation when its ejection ends.
func TestPoolEjectsRetriesAndReturns(t *testing.T) {
	var s1, s2 atomic.Int32
	var n1, n2 atomic.Int64
	s1.Store(200)
	s2.Store(503)
	a, b := counting(&s1, &n1), counting(&s2, &n2)
	defer a.Close()
	defer b.Close()
	p := poolOf(t, "least", a.URL, b.URL)
	for i := range 20 {
		if code := fetchPath(t, p, "/x"); code != 200 {
			t.Fatalf("request %d: %d (the retry should have gone to the healthy origin)", i, code)
		}
	}
	if n2.Load() > 3 {
		t.Errorf("the failing origin got %d requests; it should be ejected after 3", n2.Load())
	}
	if v := testutil.ToFloat64(p.cfg.Metrics.Ejections.WithLabelValues("s", b.URL, "passive")); v != 1 {
		t.Errorf("ejections: %v", v)
	}
	s2.Store(200)
	time.Sleep(400 * time.Millisecond) // the ejection ends
	before := n2.Load()
	for range 10 {
		fetchPath(t, p, "/y")
	}
	if n2.Load() == before {
		t.Errorf("the origin did not come back after its ejection")
	}
}

// TestPoolHashIsStable: with balance: hash each URL goes to one origin,
// and the URLs split between the origins.
func TestPoolHashIsStable(t *testing.T) {
	var s atomic.Int32
	s.Store(200)
	var n1, n2 atomic.Int64
	a, b := counting(&s, &n1), counting(&s, &n2)
	defer a.Close()
	defer b.Close()
	p := poolOf(t, "hash", a.URL, b.URL)
	for i := range 50 {
		path := "/p/" + string(rune('a'+i%26)) + string(rune('a'+i/26))
		before1 := n1.Load()
		for range 3 {
			fetchPath(t, p, path)
		}
		if d := n1.Load() - before1; d != 0 && d != 3 {
			t.Fatalf("%s went to both origins", path)
		}
	}
	if n1.Load() == 0 || n2.Load() == 0 {
		t.Errorf("hash sent everything to one origin: %d/%d", n1.Load(), n2.Load())
	}
}

// TestDeadMemberIsLoggedOnceNotPerCheck: a member that stays down is a
// warning when it is ejected, then quiet (debug) at each failed health
// check, not a warning every interval.
func TestDeadMemberIsLoggedOnceNotPerCheck(t *testing.T) {
	var out bytes.Buffer
	var mu sync.Mutex
	log := slog.New(slog.NewTextHandler(writerFunc(func(b []byte) (int, error) { mu.Lock(); defer mu.Unlock(); return out.Write(b) }), nil))
	dead := httptest.NewServer(http.NotFoundHandler())
	url := dead.URL
	dead.Close()
	p, err := NewPool(PoolConfig{Site: "s", Log: log, Origins: []ClientConfig{{URL: url, ConnectTimeout: 100 * time.Millisecond, ResponseTimeout: time.Second, MaxIdleConns: 1, IdleConnTimeout: time.Minute}},
		Metrics: NewPoolMetrics(prometheus.NewRegistry()), BaseEject: 10 * time.Millisecond, MaxEject: 20 * time.Millisecond,
		Health: HealthCheck{Path: "/", Interval: 15 * time.Millisecond, Timeout: 100 * time.Millisecond, ExpectStatus: 200}})
	if err != nil {
		t.Fatal(err)
	}
	p.Start()
	deadline := time.Now().Add(5 * time.Second)
	for {
		mu.Lock()
		n := strings.Count(out.String(), "health") + strings.Count(out.String(), "ejected")
		mu.Unlock()
		if n > 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(300 * time.Millisecond) // many more failed checks
	p.Stop()
	mu.Lock()
	defer mu.Unlock()
	if n := strings.Count(out.String(), "level=WARN"); n != 1 {
		t.Errorf("%d warnings for one dead member, want 1:\n%s", n, out.String())
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(b []byte) (int, error) { return f(b) }

// TestCarryStateKeepsAnEjectionAcrossARebuild: the pool a reload builds
// keeps an ejected origin out (same site, same URL), and nothing of
// another site's.
func TestCarryStateKeepsAnEjectionAcrossARebuild(t *testing.T) {
	var st1, st2 atomic.Int32
	st1.Store(503)
	st2.Store(200)
	var n1, n2 atomic.Int64
	bad, good := counting(&st1, &n1), counting(&st2, &n2)
	defer bad.Close()
	defer good.Close()
	old := poolOf(t, "least", bad.URL, good.URL)
	for range 10 {
		fetchPath(t, old, "/x")
	}
	down := func(p *Pool) bool {
		for _, s := range p.States() {
			if s.URL == bad.URL {
				return !s.Up
			}
		}
		t.Fatal("no state for the failing origin")
		return false
	}
	if !down(old) {
		t.Fatal("the failing origin was not ejected")
	}
	rebuilt := poolOf(t, "least", bad.URL, good.URL)
	rebuilt.CarryState(old)
	if !down(rebuilt) {
		t.Error("the rebuilt pool put the ejected origin back in rotation")
	}
	before := n1.Load()
	for range 10 {
		if code := fetchPath(t, rebuilt, "/y"); code != 200 {
			t.Errorf("a request through the rebuilt pool: %d", code)
		}
	}
	if n1.Load() != before {
		t.Errorf("the ejected origin got %d requests after the rebuild", n1.Load()-before)
	}
	other, err := NewPool(PoolConfig{Site: "another", Origins: []ClientConfig{{URL: bad.URL, ConnectTimeout: time.Second, ResponseTimeout: time.Second, MaxIdleConns: 1, IdleConnTimeout: time.Minute}}})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Stop()
	other.CarryState(old)
	if down(other) {
		t.Error("another site's pool took this site's ejection")
	}
}
