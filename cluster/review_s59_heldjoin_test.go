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

// s59GatedOrigin answers "vN path" plus padding. A v1 body sends its first
// bytes and then waits for gate (a large page on a slow link: its body is
// still streaming when the purge returns); with slowHeader a v1 answer
// comes only once gate opens (a slow render begun before the page
// changed).
type s59GatedOrigin struct {
	version    atomic.Int32
	fetches    atomic.Int64
	gate       chan struct{}
	slowHeader bool
}

type s59GatedBody struct {
	head, tail string
	gate       <-chan struct{}
	ctx        context.Context
}

func (b *s59GatedBody) Read(p []byte) (int, error) {
	if b.head != "" {
		n := copy(p, b.head)
		b.head = b.head[n:]
		return n, nil
	}
	if b.tail == "" {
		return 0, io.EOF
	}
	select {
	case <-b.gate:
	case <-b.ctx.Done():
		return 0, b.ctx.Err()
	}
	n := copy(p, b.tail)
	b.tail = b.tail[n:]
	return n, nil
}

func (o *s59GatedOrigin) Fetch(ctx context.Context, fr proxy.FetchRequest) (proxy.Result, error) {
	o.fetches.Add(1)
	v := o.version.Load()
	if v == 1 && o.slowHeader {
		select {
		case <-o.gate:
		case <-ctx.Done():
			return proxy.Result{}, ctx.Err()
		}
	}
	h := http.Header{"Cache-Control": {"public, max-age=600"}, "Content-Type": {"text/plain"}}
	body := "v" + string(rune('0'+v)) + " " + fr.Req.URL.Path + strings.Repeat(".", 64)
	var rd io.Reader = strings.NewReader(body)
	if v == 1 && !o.slowHeader {
		rd = &s59GatedBody{head: body[:8], tail: body[8:], gate: o.gate, ctx: ctx}
	}
	return proxy.Result{Resp: &http.Response{StatusCode: 200, Header: h, Body: io.NopCloser(rd), ContentLength: int64(len(body))}, Keep: true}, nil
}

// TestS59AHeldFillIsJoinedByARequestAfterThePurgeReturned: during a purge
// round, the sending node A has purged and holds (purgehold.go); the home H
// has not purged yet. A client at A asks for the page: A's fill climbs to
// H and gets H's pre-purge copy (H's origin fill, begun before the page
// changed, still streaming). A's hold keeps A from storing it, as
// documented ("it serves it to the request that asked, the purge being on
// its way, but does not store it"). But A's fill stays joinable: it began
// after A's own purge, so the purge log does not name it (co.join), and
// fillWhole publishes it as shared whatever res.Keep/res.PurgeHeld say.
// Once the purge has returned (every peer purged), a new client at A joins
// that fill and is served the purged copy, after the purge returned.
func TestS59AHeldFillIsJoinedByARequestAfterThePurgeReturned(t *testing.T) {
	s59HeldJoin(t, &s59GatedOrigin{gate: make(chan struct{})}, "/doc/s59held",
		"it joined a fill A held back from its store because of that very purge")
}

// s59HeldJoin stages a purge round from A whose home H purges last, with
// o's v1 held at its gate, and asks A for the page during the round and
// after it returned: the request after must not be served v1 (why: what
// it would have joined), nor A keep v1.
func s59HeldJoin(t *testing.T, o *s59GatedOrigin, page, why string) {
	t.Helper()
	o.version.Store(1)
	var once sync.Once
	openGate := func() { once.Do(func() { close(o.gate) }) }
	t.Cleanup(openGate)
	nodes := startRealNodes(t, []string{"A", "H"}, routing.ModeHybrid, 2, 500*time.Millisecond, o)
	a, h := nodes["A"], nodes["H"]
	p := pageHomedAt(t, a, "H", page)

	// H sees every peer request: climbs are signalled, its purge waits for
	// release.
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

	// 1. A first client: A climbs to H, H's origin fill streams v1 (gated),
	// or renders it slowly (slowHeader).
	first := make(chan string, 1)
	go func() { first <- askWith(a, p).Body.String() }()
	wait(climbs, "first climb at H")
	for o.fetches.Load() == 0 {
		time.Sleep(5 * time.Millisecond)
	}

	// 2. The page changes at the origin; the operator purges it at A. H's
	// purge is held back (H is reached last).
	o.version.Store(2)
	purged := purgeInBackground(t, a, proxy.PurgeRequest{URL: "http://site.example" + p}, a.ph.Purge)
	wait(reached, "purge at H")

	// 3. During the round, a client at A: A purged, so it leads a new fill,
	// which climbs to H and joins H's v1 fill (H has not purged). A holds:
	// it will not store it.
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

	// 5. After the purge returned: a new client at A.
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
		t.Errorf("a request made after the purge returned (every peer purged) is served the purged copy: %s", why)
	}
	w := askWith(a, p)
	if strings.HasPrefix(w.Body.String(), "v1 ") {
		t.Errorf("A keeps the purged copy: %q, Cache-Status %q", w.Body.String(), w.Header().Get("Cache-Status"))
	}
}
