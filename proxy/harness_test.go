package proxy

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// clock is a settable test clock.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time  { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *clock) Set(t time.Time) { c.mu.Lock(); c.now = t; c.mu.Unlock() }

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// originResp is what the test origin answers.
type originResp struct {
	status int
	header map[string]string
	body   string
}

// testOrigin is a real HTTP server on loopback whose answer a test sets. It
// answers 304 to a conditional request that matches its ETag or
// Last-Modified, like a real origin, and stamps Date from the test clock.
type testOrigin struct {
	srv   *httptest.Server
	clk   *clock
	mu    sync.Mutex
	resp  originResp
	calls atomic.Int64
	last  http.Header // headers of the last request
	delay time.Duration
}

func newTestOrigin(t testing.TB, clk *clock) *testOrigin {
	o := &testOrigin{clk: clk}
	o.srv = httptest.NewServer(http.HandlerFunc(o.serve))
	t.Cleanup(o.srv.Close)
	return o
}

func (o *testOrigin) set(r originResp) { o.mu.Lock(); o.resp = r; o.mu.Unlock() }

func (o *testOrigin) serve(w http.ResponseWriter, r *http.Request) {
	o.calls.Add(1)
	o.mu.Lock()
	resp := o.resp
	o.last = r.Header.Clone()
	delay := o.delay
	o.mu.Unlock()
	if delay > 0 {
		time.Sleep(delay)
	}
	h := w.Header()
	h.Set("Date", o.clk.Now().Format(http.TimeFormat))
	for k, v := range resp.header {
		h.Set(k, v)
	}
	if resp.status == 0 {
		resp.status = 200
	}
	if resp.status == 200 {
		inm := r.Header.Get("If-None-Match")
		ims := r.Header.Get("If-Modified-Since")
		if (inm != "" && inm == resp.header["ETag"]) || (inm == "" && ims != "" && ims == resp.header["Last-Modified"]) {
			w.WriteHeader(http.StatusNotModified)
			return
		}
	}
	w.WriteHeader(resp.status)
	_, _ = io.WriteString(w, resp.body)
}

// originFetcher is the simplest Fetcher: plain HTTP to the test origin.
type originFetcher struct {
	base   string
	client *http.Client
}

func (f *originFetcher) Fetch(ctx context.Context, fr FetchRequest) (Result, error) {
	req := fr.Req
	out := req.Clone(ctx)
	u := *req.URL
	u.Scheme = "http"
	u.Host = strings.TrimPrefix(f.base, "http://")
	out.URL = &u
	out.RequestURI = ""
	resp, err := f.client.Transport.RoundTrip(out)
	return Result{Resp: resp, Keep: true}, err
}

// testProxy is a handler in front of a test origin.
type testProxy struct {
	h      *Handler
	origin *testOrigin
	clk    *clock
}

func newTestProxy(t testing.TB, mod func(*Config)) *testProxy {
	t.Helper()
	clk := &clock{now: t0}
	o := newTestOrigin(t, clk)
	cfg := DefaultConfig()
	cfg.Now = clk.Now
	cfg.CoalesceTimeout = 2 * time.Second
	if mod != nil {
		mod(&cfg)
	}
	store := NewStore(64<<20, 8)
	f := &originFetcher{base: o.srv.URL, client: &http.Client{Transport: &http.Transport{}}}
	h := New(cfg, store, f, NewMetrics(prometheus.NewRegistry(), store), nil)
	return &testProxy{h: h, origin: o, clk: clk}
}

// do sends one client request through the handler.
func (p *testProxy) do(method, path string, hdr map[string]string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, "http://example.com"+path, nil)
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	w := httptest.NewRecorder()
	p.h.ServeHTTP(w, req)
	p.h.Wait()
	return w
}

func httptestRequestWithBody(method, path, body string) *http.Request {
	return httptest.NewRequest(method, "http://example.com"+path, strings.NewReader(body))
}

func newRecorder() *httptest.ResponseRecorder { return httptest.NewRecorder() }

// chunkSize is the size of the chunks streamChunks writes.
const chunkSize = 32 << 10

// streamChunks writes n chunks of chunkSize bytes, flushing each and pausing
// after it (no pause when 0): a slow origin streaming a body without a
// length. It stops at the first write error (the client went away).
func streamChunks(w http.ResponseWriter, n int, pause time.Duration) {
	chunk := []byte(strings.Repeat("x", chunkSize))
	for range n {
		if _, err := w.Write(chunk); err != nil {
			return
		}
		w.(http.Flusher).Flush()
		if pause > 0 {
			time.Sleep(pause)
		}
	}
}

// waitUntil polls cond until it holds: a test waits for the event it
// needs (a fill under way, a slot taken), not for a time that a busy
// machine may not keep. It fails after 10 s.
func waitUntil(t testing.TB, what string, cond func() bool) {
	t.Helper()
	// A bound for a stuck test, not a timing assertion: generous, so that
	// a machine busy with other work (CI with every core loaded) is not
	// taken for a fault.
	const bound = 60 * time.Second
	for end := time.Now().Add(bound); time.Now().Before(end); time.Sleep(time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("not within %v: %s", bound, what)
}

// fillOf returns the fill under way for the URL of a plain GET of target
// ("http://example.com/x"): streaming once its response is published,
// trimming once its body outgrew what it may keep.
func (h *Handler) fillOf(target string) (streaming, trimming bool) {
	key := h.requestKey(httptest.NewRequest("GET", target, nil))
	h.co.mu.Lock()
	f := h.co.fills[key]
	h.co.mu.Unlock()
	if f == nil {
		return false, false
	}
	select {
	case <-f.ready:
	default:
		return false, false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return true, f.trim
}
