package proxy

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"net/textproto"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/edgecache/edge/origin"
)

// hintingOrigin answers every request with a 103 (a Link, and fields that
// must not be relayed) and then, once release is closed, the final answer
// cc says how to cache.
type hintingOrigin struct {
	release chan struct{}
	calls   atomic.Int64
}

func (o *hintingOrigin) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	n := o.calls.Add(1)
	w.Header().Set("Link", fmt.Sprintf("</style%d.css>; rel=preload; as=style", n))
	w.Header().Set("Set-Cookie", "session=origin-secret")
	w.Header().Set("X-Hint-Only", "1")
	w.WriteHeader(http.StatusEarlyHints)
	w.Header().Del("Link")
	w.Header().Del("Set-Cookie")
	w.Header().Del("X-Hint-Only")
	<-o.release
	w.Header().Set("Cache-Control", r.URL.Query().Get("cc"))
	_, _ = io.WriteString(w, "page "+r.URL.Path)
}

// earlyHintsProxy serves a Handler in front of o through the origin
// client every node uses (the hints ride on its fetch), on a real socket.
func earlyHintsProxy(t *testing.T, o *hintingOrigin) (*Handler, *httptest.Server) {
	t.Helper()
	h := handlerOverOriginClient(t, o)
	front := httptest.NewServer(h)
	t.Cleanup(front.Close)
	return h, front
}

// handlerOverOriginClient is a Handler with the default config whose
// fetcher is the origin client every node uses, in front of o served on
// a real socket.
func handlerOverOriginClient(t *testing.T, o http.Handler) *Handler {
	t.Helper()
	up := httptest.NewServer(o)
	t.Cleanup(up.Close)
	oc, err := origin.NewClient(origin.ClientConfig{URL: up.URL, ConnectTimeout: 5 * time.Second, ResponseTimeout: 30 * time.Second, MaxIdleConns: 4, IdleConnTimeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	store := NewStore(16<<20, 8)
	return New(DefaultConfig(), store, FetcherFunc(oc.Fetch), NewMetrics(prometheus.NewRegistry(), store), nil)
}

// hintedGet asks front for target and returns the final answer's status,
// fields and body with the 1xx answers it saw on the way.
func hintedGet(t *testing.T, front string, method, target string) (int, http.Header, string, []http.Header) {
	t.Helper()
	var mu sync.Mutex
	var hints []http.Header
	ctx := httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{
		Got1xxResponse: func(code int, h textproto.MIMEHeader) error {
			mu.Lock()
			defer mu.Unlock()
			c := http.Header(h).Clone()
			c.Set(":status", fmt.Sprint(code))
			hints = append(hints, c)
			return nil
		},
	})
	req, err := http.NewRequestWithContext(ctx, method, front+target, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	mu.Lock()
	defer mu.Unlock()
	return resp.StatusCode, resp.Header, string(b), hints
}

func TestAnOriginsEarlyHintsReachOnlyTheClientWhoseMissWentToTheOrigin(t *testing.T) {
	o := &hintingOrigin{release: make(chan struct{})}
	close(o.release)
	h, front := earlyHintsProxy(t, o)

	code, hdr, body, hints := hintedGet(t, front.URL, "GET", "/p?cc=max-age=600")
	if code != 200 || body != "page /p" {
		t.Fatalf("miss: %d %q", code, body)
	}
	if len(hints) != 1 || hints[0].Get(":status") != "103" || hints[0].Get("Link") != "</style1.css>; rel=preload; as=style" {
		t.Fatalf("the client whose miss went to the origin got %v, want its one 103 with the origin's Link", hints)
	}
	for _, f := range []string{"Set-Cookie", "X-Hint-Only"} {
		if hints[0].Get(f) != "" {
			t.Errorf("the relayed 103 carries %s: %q; only Link goes on", f, hints[0].Get(f))
		}
	}
	if hdr.Get("Link") != "" || hdr.Get("Set-Cookie") != "" {
		t.Errorf("the final answer took the 103's fields: Link %q, Set-Cookie %q", hdr.Get("Link"), hdr.Get("Set-Cookie"))
	}

	// The hit: the entry holds no hint, and no 103 is made up for it.
	code, hdr, body, hints = hintedGet(t, front.URL, "GET", "/p?cc=max-age=600")
	if code != 200 || body != "page /p" || len(hints) != 0 || hdr.Get("Link") != "" || o.calls.Load() != 1 {
		t.Fatalf("hit: %d %q, hints %v, Link %q, origin asked %d times", code, body, hints, hdr.Get("Link"), o.calls.Load())
	}

	// A pass relays them too (no-store: every request goes to the origin).
	code, _, _, hints = hintedGet(t, front.URL, "GET", "/q?cc=no-store")
	if code != 200 || len(hints) != 1 || hints[0].Get("Link") != "</style2.css>; rel=preload; as=style" {
		t.Fatalf("no-store miss: %d, hints %v", code, hints)
	}
	code, _, _, hints = hintedGet(t, front.URL, "POST", "/q?cc=no-store")
	if code != 200 || len(hints) != 1 || hints[0].Get("Link") != "</style3.css>; rel=preload; as=style" {
		t.Fatalf("POST pass: %d, hints %v", code, hints)
	}
	if got := testutil.ToFloat64(h.metrics.earlyHints[hintsRelayed]); got != 3 {
		t.Errorf("edge_early_hints_total{outcome=relayed} = %v, want 3", got)
	}
	if s := h.Stats().EarlyHints; s[hintsRelayed] != 3 || s[hintsDropped] != 0 {
		t.Errorf("status page's early hints %v", s)
	}
}

// Requests that join a miss under way share its final answer, never the
// 103 the origin sent for the leader's request.
func TestEarlyHintsAreNotSharedWithRequestsThatJoinTheFetch(t *testing.T) {
	o := &hintingOrigin{release: make(chan struct{})}
	h, front := earlyHintsProxy(t, o)

	type answer struct {
		code  int
		hints []http.Header
	}
	lead := make(chan answer, 1)
	go func() {
		code, _, _, hints := hintedGet(t, front.URL, "GET", "/shared?cc=max-age=600")
		lead <- answer{code, hints}
	}()
	waitUntil(t, "the leader's fetch is at the origin", func() bool { return o.calls.Load() == 1 })
	const joiners = 8
	joined := make(chan answer, joiners)
	for range joiners {
		go func() {
			code, _, _, hints := hintedGet(t, front.URL, "GET", "/shared?cc=max-age=600")
			joined <- answer{code, hints}
		}()
	}
	// Hold the origin until every joiner's request has reached the
	// handler (the in-flight gauge counts the leader too).
	waitUntil(t, "the joiners are in", func() bool { return testutil.ToFloat64(h.metrics.InFlight) == joiners+1 })
	close(o.release)
	if a := <-lead; a.code != 200 || len(a.hints) != 1 {
		t.Fatalf("leader: %d, hints %v", a.code, a.hints)
	}
	for range joiners {
		if a := <-joined; a.code != 200 || len(a.hints) != 0 {
			t.Fatalf("a request that joined the fetch got %d with hints %v: the 103 was the leader's", a.code, a.hints)
		}
	}
	if o.calls.Load() != 1 {
		t.Fatalf("origin asked %d times, want 1 (the joiners share the fetch)", o.calls.Load())
	}
}

// No 1xx to an HTTP/1.0 client (RFC 9110 §15.2); the hint is counted as
// dropped.
func TestEarlyHintsAreNotSentToAnHTTP10Client(t *testing.T) {
	o := &hintingOrigin{release: make(chan struct{})}
	close(o.release)
	h, front := earlyHintsProxy(t, o)
	c, err := net.Dial("tcp", front.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, "GET /old?cc=max-age=60 HTTP/1.0\r\nHost: example.com\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	status, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(status, " 200 ") {
		t.Fatalf("an HTTP/1.0 client's first status line is %q, want the final 200", status)
	}
	if got := testutil.ToFloat64(h.metrics.earlyHints[hintsDropped]); got != 1 {
		t.Errorf("edge_early_hints_total{outcome=dropped} = %v, want 1", got)
	}
}
