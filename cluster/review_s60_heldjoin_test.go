package cluster

import (
	"context"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edgecache/edge/proxy"
	"github.com/edgecache/edge/routing"
)

// s60SlowHeaderOrigin renders a page from the version it reads as the
// fetch begins; a v1 render answers only once gate opens (a slow render
// begun before the page changed).
type s60SlowHeaderOrigin struct {
	version atomic.Int32
	fetches atomic.Int64
	gate    chan struct{}
}

func (o *s60SlowHeaderOrigin) Fetch(ctx context.Context, fr proxy.FetchRequest) (proxy.Result, error) {
	o.fetches.Add(1)
	v := o.version.Load()
	if v == 1 {
		select {
		case <-o.gate:
		case <-ctx.Done():
			return proxy.Result{}, ctx.Err()
		}
	}
	h := http.Header{"Cache-Control": {"public, max-age=600"}, "Content-Type": {"text/plain"}}
	body := "v" + string(rune('0'+v)) + " " + fr.Req.URL.Path + strings.Repeat(".", 64)
	return proxy.Result{Resp: &http.Response{StatusCode: 200, Header: h, Body: io.NopCloser(strings.NewReader(body)), ContentLength: int64(len(body))}, Keep: true}, nil
}

// TestS60AFillWhoseHeaderIsNotInWhenThePurgeReturnsIsStillJoined: as
// TestS59AHeldFillIsJoinedByARequestAfterThePurgeReturned, but the home's
// origin fill (begun before the page changed) has not answered its header
// when the purge returns. A's fill, begun during the round after A's own
// purge, is neither published nor held yet, so a request arriving after
// the purge returned joins it (the purge log does not name it); the early
// done in fillWhole comes after that join, and runs only for PurgeHeld
// (here A's answer is not kept for its q-rule, detail=q-rule, so it is not
// PurgeHeld and stays joinable after its header too).
func TestS60AFillWhoseHeaderIsNotInWhenThePurgeReturnsIsStillJoined(t *testing.T) {
	o := &s60SlowHeaderOrigin{gate: make(chan struct{})}
	o.version.Store(1)
	var once sync.Once
	openGate := func() { once.Do(func() { close(o.gate) }) }
	t.Cleanup(openGate)
	nodes := startRealNodes(t, []string{"A", "H"}, routing.ModeHybrid, 2, 500*time.Millisecond, o)
	a, h := nodes["A"], nodes["H"]
	p := pageHomedAt(t, a, "H", "/doc/s60held")

	climbs := make(chan struct{}, 8)
	reached := make(chan struct{})
	release := make(chan struct{})
	var relOnce, reachOnce sync.Once
	t.Cleanup(func() { relOnce.Do(func() { close(release) }) })
	hook := func(r *http.Request) {
		if r.Method == http.MethodPost && strings.HasPrefix(r.URL.Path, "/_edge/purge") {
			reachOnce.Do(func() { close(reached) })
			<-release
			return
		}
		if r.Method == http.MethodGet {
			select {
			case climbs <- struct{}{}:
			default:
			}
		}
	}
	h.hold.Store(&hook)

	deadline := time.After(30 * time.Second)
	wait := func(ch <-chan struct{}, what string) {
		t.Helper()
		select {
		case <-ch:
		case <-deadline:
			t.Fatalf("hang: %s", what)
		}
	}

	// 1. A first client: A climbs to H, H's origin renders v1 (slowly).
	first := make(chan string, 1)
	go func() { first <- askWith(a, p).Body.String() }()
	wait(climbs, "first climb at H")
	for o.fetches.Load() == 0 {
		time.Sleep(5 * time.Millisecond)
	}

	// 2. The page changes; the operator purges at A; H's purge waits.
	o.version.Store(2)
	purged := purgeInBackground(t, a, proxy.PurgeRequest{URL: "http://site.example" + p}, a.ph.Purge)
	wait(reached, "purge at H")

	// 3. During the round, a client at A leads a new fill (A purged),
	// which climbs to H and joins H's v1 render.
	second := make(chan *http.Response, 1)
	go func() { w := askWith(a, p); second <- w.Result() }()
	wait(climbs, "second climb at H")
	time.Sleep(200 * time.Millisecond) // H joins its own fill for it

	// 4. H purges; the purge returns with every peer purged.
	relOnce.Do(func() { close(release) })
	select {
	case n := <-purged:
		if n != 1 {
			t.Skipf("not as staged: peers purged %d", n)
		}
	case <-deadline:
		t.Fatal("hang: purge round")
	}

	// 5. After the purge returned, a new client at A; then the render ends.
	third := make(chan *http.Response, 1)
	go func() { w := askWith(a, p); third <- w.Result() }()
	time.Sleep(200 * time.Millisecond) // it joins (or not) A's fill of step 3
	openGate()

	var r3 *http.Response
	select {
	case r3 = <-third:
	case <-deadline:
		t.Fatal("hang: third request")
	}
	b3, _ := io.ReadAll(r3.Body)
	t.Logf("origin fetches %d; first %q", o.fetches.Load(), <-first)
	r2 := <-second
	b2, _ := io.ReadAll(r2.Body)
	t.Logf("during the round at A: %q, Cache-Status %q", b2, r2.Header.Get("Cache-Status"))
	t.Logf("after the purge returned at A: %q, Cache-Status %q", b3, r3.Header.Get("Cache-Status"))
	if strings.HasPrefix(string(b3), "v1 ") {
		t.Errorf("a request made after the purge returned (every peer purged) is served the purged copy: it joined A's fill before the held copy's header came")
	}
	w := askWith(a, p)
	if strings.HasPrefix(w.Body.String(), "v1 ") {
		t.Errorf("A keeps the purged copy: %q, Cache-Status %q", w.Body.String(), w.Header().Get("Cache-Status"))
	}
}
