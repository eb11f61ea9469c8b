package proxy

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// One regression test per item of the shared-cache safety issue, each
// named for what it prevents. Each drives the real handler in front of a
// real loopback origin.

// handlerProxy puts a handler in front of an origin served by fn.
func handlerProxy(t *testing.T, fn http.HandlerFunc, mod func(*Config)) (*Handler, *atomic.Int64) {
	t.Helper()
	var calls atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		fn(w, r)
	}))
	t.Cleanup(srv.Close)
	cfg := DefaultConfig()
	// X-User stands for whatever the origin personalises on. Declared
	// unkeyed, it reaches the origin without splitting the cache, so these
	// tests hold the cache's own isolation rules to account (a keyed
	// field would give each user an entry of its own and hide a leak).
	cfg.UnkeyedRequestHeaders = []string{"X-User"}
	if mod != nil {
		mod(&cfg)
	}
	store := NewStore(64<<20, 8)
	h := New(cfg, store, &originFetcher{base: srv.URL, client: &http.Client{Transport: &http.Transport{}}}, NewMetrics(prometheus.NewRegistry(), store), nil)
	return h, &calls
}

func serve(h *Handler, method, target string, hdr ...string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(method, "http://example.com"+target, nil)
	for i := 0; i+1 < len(hdr); i += 2 {
		r.Header.Add(hdr[i], hdr[i+1])
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	h.Wait()
	return w
}

// Item 1.
func TestSetCookieFrom304NeverReachesAnotherUser(t *testing.T) {
	for _, storeSetCookie := range []bool{false, true} {
		for _, swr := range []bool{false, true} {
			t.Run(fmt.Sprintf("store_set_cookie=%v,swr=%v", storeSetCookie, swr), func(t *testing.T) {
				clk := &clock{now: t0}
				h, _ := handlerProxy(t, func(w http.ResponseWriter, r *http.Request) {
					w.Header().Set("Date", clk.Now().Format(http.TimeFormat))
					cc := "max-age=1"
					if swr {
						cc += ", stale-while-revalidate=60"
					}
					w.Header().Set("Cache-Control", cc)
					w.Header().Set("ETag", `"1"`)
					if r.Header.Get("If-None-Match") == `"1"` {
						w.Header().Set("Set-Cookie", "session="+r.Header.Get("X-User"))
						w.WriteHeader(http.StatusNotModified)
						return
					}
					_, _ = io.WriteString(w, "page")
				}, func(c *Config) { c.Now = clk.Now; c.Policy.StoreSetCookie = storeSetCookie })
				serve(h, "GET", "/a", "X-User", "alice")
				clk.Set(t0.Add(5 * time.Second))
				w := serve(h, "GET", "/a", "X-User", "alice") // revalidates (SWR: in the background)
				if !swr && w.Header().Get("Set-Cookie") != "session=alice" {
					t.Errorf("the user whose request caused the 304 lost its own Set-Cookie: %q", w.Header().Get("Set-Cookie"))
				}
				w = serve(h, "GET", "/a", "X-User", "bob")
				if sc := w.Header().Values("Set-Cookie"); len(sc) > 0 {
					t.Fatalf("bob received %q (Cache-Status %q)", sc, w.Header().Get("Cache-Status"))
				}
			})
		}
	}
}

// Item 1, second half: with store_set_cookie the requester that caused
// the miss keeps its own cookie, and nobody else gets it.
func TestStoreSetCookieRequesterKeepsItsCookie(t *testing.T) {
	h, _ := handlerProxy(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=60")
		w.Header().Set("Set-Cookie", "session="+r.Header.Get("X-User"))
		_, _ = io.WriteString(w, "page")
	}, func(c *Config) { c.Policy.StoreSetCookie = true })
	if w := serve(h, "GET", "/a", "X-User", "alice"); w.Header().Get("Set-Cookie") != "session=alice" {
		t.Fatalf("alice's own Set-Cookie = %q", w.Header().Get("Set-Cookie"))
	}
	w := serve(h, "GET", "/a", "X-User", "bob")
	if !strings.Contains(w.Header().Get("Cache-Status"), "hit") || len(w.Header().Values("Set-Cookie")) > 0 {
		t.Fatalf("bob: Cache-Status %q, Set-Cookie %q", w.Header().Get("Cache-Status"), w.Header().Values("Set-Cookie"))
	}
}

// Item 2.
func TestCollapsedWaiterNeverGetsAnUnshareableResponse(t *testing.T) {
	var down atomic.Bool
	h, calls := handlerProxy(t, func(w http.ResponseWriter, r *http.Request) {
		if down.Load() {
			w.WriteHeader(http.StatusBadGateway)
			return
		}
		time.Sleep(150 * time.Millisecond)
		// A logged-in page: no Cache-Control, no validators.
		_, _ = io.WriteString(w, "account of "+r.Header.Get("Cookie"))
	}, nil)
	var wg sync.WaitGroup
	bodies := map[string]string{}
	var mu sync.Mutex
	for _, user := range []string{"uid=alice", "uid=bob"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w := serve(h, "GET", "/account", "Cookie", user)
			mu.Lock()
			bodies[user] = w.Body.String()
			mu.Unlock()
		}()
		time.Sleep(30 * time.Millisecond)
	}
	wg.Wait()
	for user, body := range bodies {
		if body != "account of "+user {
			t.Errorf("%s received %q", user, body)
		}
	}
	if calls.Load() != 2 {
		t.Errorf("origin requests = %d, want 2 (each user fetches for itself)", calls.Load())
	}
	down.Store(true)
	if w := serve(h, "GET", "/account", "Cookie", "uid=carol"); strings.Contains(w.Body.String(), "account of") {
		t.Fatalf("stale-if-error served a response that was never fresh: %q", w.Body.String())
	}
}

// Item 3.
func TestVaryKeyedOnTheForwardedRequest(t *testing.T) {
	h, _ := handlerProxy(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=60")
		w.Header().Set("Vary", "Accept-Language, Origin")
		lang := r.Header.Get("Accept-Language")
		if lang == "" {
			lang = "en"
		}
		if o := r.Header.Get("Origin"); o != "" {
			w.Header().Set("Access-Control-Allow-Origin", o)
		}
		_, _ = io.WriteString(w, "lang="+lang)
	}, nil)
	// The attacker removes its own Accept-Language before the origin.
	serve(h, "GET", "/vary/1", "Accept-Language", "de", "Connection", "Accept-Language")
	if w := serve(h, "GET", "/vary/1", "Accept-Language", "de"); w.Body.String() != "lang=de" {
		t.Fatalf("a de user got %q (Cache-Status %q)", w.Body.String(), w.Header().Get("Cache-Status"))
	}
	serve(h, "GET", "/vary/2", "Origin", "https://app.example", "Connection", "Origin")
	if w := serve(h, "GET", "/vary/2", "Origin", "https://app.example"); w.Header().Get("Access-Control-Allow-Origin") != "https://app.example" {
		t.Fatalf("a CORS request got a variant without Access-Control-Allow-Origin (Cache-Status %q)", w.Header().Get("Cache-Status"))
	}
}

// Item 4.
func TestQueryOrderKeyAgreesWithForwardedRequest(t *testing.T) {
	echo := func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=60")
		_, _ = io.WriteString(w, r.URL.RawQuery)
	}
	h, _ := handlerProxy(t, echo, nil)
	serve(h, "GET", "/p?id=attacker&id=victim")
	if w := serve(h, "GET", "/p?id=victim&id=attacker"); w.Body.String() != "id=victim&id=attacker" {
		t.Fatalf("got %q: the key merged two queries the origin told apart", w.Body.String())
	}
	// Opt-in normalization sorts both the key and the forwarded query.
	h, calls := handlerProxy(t, echo, func(c *Config) { c.SortQuery = true })
	serve(h, "GET", "/p?b=2&a=1")
	w := serve(h, "GET", "/p?a=1&b=2")
	if w.Body.String() != "a=1&b=2" || calls.Load() != 1 {
		t.Fatalf("sort_query: body %q, %d origin requests; want the sorted query once", w.Body.String(), calls.Load())
	}
}

// Item 5.
func TestForwardingFieldsAreTheEdgesOwn(t *testing.T) {
	var seen http.Header
	var mu sync.Mutex
	h, _ := handlerProxy(t, func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = r.Header.Clone()
		mu.Unlock()
		w.Header().Set("Cache-Control", "max-age=60")
		_, _ = io.WriteString(w, "<a href=//"+r.Header.Get("X-Forwarded-Host")+"/>")
	}, func(c *Config) { c.TrustedProxies = []netip.Prefix{netip.MustParsePrefix("10.9.0.0/16")} })
	r := httptest.NewRequest("GET", "http://example.com:8080/page", nil)
	r.RemoteAddr = "192.0.2.7:5555"
	for k, v := range map[string]string{"X-Forwarded-Host": "evil.example", "X-Forwarded-For": "1.2.3.4", "X-Forwarded-Proto": "https",
		"Forwarded": "host=evil.example", "X-Original-Url": "/admin", "X-Rewrite-Url": "/admin"} {
		r.Header.Set(k, v)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	mu.Lock()
	got := seen
	mu.Unlock()
	if strings.Contains(w.Body.String(), "evil") {
		t.Fatalf("a client's X-Forwarded-Host reached a cached page: %q", w.Body.String())
	}
	want := map[string]string{"X-Forwarded-Host": "example.com", "X-Forwarded-For": "192.0.2.7", "X-Forwarded-Proto": "http",
		"Forwarded": `for=192.0.2.7;host=example.com;proto=http`, "X-Original-Url": "", "X-Rewrite-Url": ""}
	for k, v := range want {
		if got.Get(k) != v {
			t.Errorf("origin saw %s = %q, want %q", k, got.Get(k), v)
		}
	}
	// A trusted proxy's fields are kept and extended.
	r = httptest.NewRequest("GET", "http://example.com/page2", nil)
	r.RemoteAddr = "10.9.1.1:5555"
	r.Header.Set("X-Forwarded-For", "198.51.100.1")
	r.Header.Set("X-Forwarded-Proto", "https")
	h.ServeHTTP(httptest.NewRecorder(), r)
	mu.Lock()
	got = seen
	mu.Unlock()
	if got.Get("X-Forwarded-For") != "198.51.100.1, 10.9.1.1" || got.Get("X-Forwarded-Proto") != "https" {
		t.Errorf("trusted proxy: X-Forwarded-For %q, X-Forwarded-Proto %q", got.Get("X-Forwarded-For"), got.Get("X-Forwarded-Proto"))
	}
}

// Item 6.
func TestNoContentTypeIsInvented(t *testing.T) {
	h, _ := handlerProxy(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header()["Content-Type"] = nil
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.Header().Set("Cache-Control", "max-age=60")
		_, _ = io.WriteString(w, "<html><script>alert(1)</script></html>")
	}, nil)
	srv := httptest.NewServer(h) // a real server: net/http sniffs when the field is unset
	defer srv.Close()
	for i := range 2 { // the miss, then the hit
		resp, err := http.Get(srv.URL + "/upload/1")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if ct := resp.Header.Get("Content-Type"); ct != "" {
			t.Fatalf("request %d: Content-Type %q was invented", i, ct)
		}
	}
}

// Item 7.
func TestAuthorizationBypassesOnlyThatRequest(t *testing.T) {
	h, calls := handlerProxy(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=60")
		_, _ = io.WriteString(w, "public page")
	}, nil)
	serve(h, "GET", "/p", "Authorization", "Bearer x")
	serve(h, "GET", "/p")
	w := serve(h, "GET", "/p")
	if !strings.Contains(w.Header().Get("Cache-Status"), "hit") || calls.Load() != 2 {
		t.Fatalf("after one request with Authorization: Cache-Status %q, %d origin requests; want a hit after 2", w.Header().Get("Cache-Status"), calls.Load())
	}
}

// rangeOrigin serves a large body with Range support and counts the bytes
// it sent.
func rangeOrigin(size int, sent *atomic.Int64) http.HandlerFunc {
	body := bytes.Repeat([]byte("0123456789"), size/10)
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=60")
		w.Header().Set("Content-Type", "application/octet-stream")
		cw := &countingWriter{ResponseWriter: w, n: sent}
		http.ServeContent(cw, r, "", time.Time{}, bytes.NewReader(body))
	}
}

type countingWriter struct {
	http.ResponseWriter
	n *atomic.Int64
}

func (c *countingWriter) Write(b []byte) (int, error) {
	c.n.Add(int64(len(b)))
	return c.ResponseWriter.Write(b)
}

// Item 9.
func TestRangeOfObjectTooLargeToStoreIsForwarded(t *testing.T) {
	var sent, whole atomic.Int64
	serveRange := rangeOrigin(4<<20, &sent)
	h, _ := handlerProxy(t, func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Range") == "" {
			whole.Add(1)
		}
		serveRange(w, r)
	}, func(c *Config) { c.MaxObjectBytes = 1 << 20 })
	for i := range 3 {
		w := serve(h, "GET", "/big.iso", "Range", "bytes=0-0")
		if w.Code != http.StatusPartialContent || w.Body.Len() != 1 {
			t.Fatalf("request %d: %d with %d bytes, want 206 with 1", i, w.Code, w.Body.Len())
		}
	}
	// The first request learns the size from the headers (and drops that
	// response), then asks again with the range; later ones ask with the
	// range straight away.
	if whole.Load() != 1 {
		t.Fatalf("the origin was asked for the whole object %d times, want 1", whole.Load())
	}
}

// Item 10.
func TestRangeAmplificationIsCapped(t *testing.T) {
	var sent atomic.Int64
	h, _ := handlerProxy(t, rangeOrigin(10000, &sent), nil)
	serve(h, "GET", "/obj")
	spec := oneByteRanges(2000, 5)
	w := serve(h, "GET", "/obj", "Range", spec)
	if w.Body.Len() > 10000 {
		t.Fatalf("2000 one-byte ranges of a 10000-byte object returned %d bytes", w.Body.Len())
	}
	// Overlapping ranges are merged into one.
	w = serve(h, "GET", "/obj", "Range", "bytes=0-99,50-149,100-199")
	if w.Code != http.StatusPartialContent || w.Body.Len() != 200 {
		t.Fatalf("overlapping ranges: %d, %d bytes; want one 200-byte part", w.Code, w.Body.Len())
	}
}

// oneByteRanges is a Range value asking for n one-byte ranges, step bytes
// apart.
func oneByteRanges(n, step int) string {
	var b strings.Builder
	b.WriteString("bytes=")
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "%d-%d", i*step, i*step)
	}
	return b.String()
}

func TestLimitRanges(t *testing.T) {
	cases := []struct {
		spec string
		want string
		ok   bool
	}{
		{"bytes=0-0", "bytes=0-0", true},
		{"bytes=0-99,50-149", "bytes=0-149", true},
		{"bytes=-10", "bytes=990-999", true},
		{"bytes=500-", "bytes=500-999", true},
		{"bytes=0-1,500-501", "bytes=0-1,500-501", true},
		{"bytes=0-1,60-61", "bytes=0-61", true},                  // a small gap is cheaper than a part
		{"bytes=5000-6000", "bytes=1000-", true},                 // unsatisfiable: one ServeContent answers 416
		{"bytes=-0", "bytes=1000-", true},                        // a zero suffix is unsatisfiable (RFC 9110 §14.1.2)
		{"bytes=-0,2000-", "bytes=1000-", true},                  // all of them
		{"bytes=10-99999999999999999999", "bytes=10-999", true},  // a last-pos past any int64: the rest
		{"bytes=99999999999999999999-", "bytes=1000-", true},     // a first-pos past any int64: past the end
		{"bytes=-99999999999999999999", "bytes=0-999", true},     // a suffix longer than anything: the whole
		{"bytes=abc", "bytes=abc", true},                         // malformed: left to ServeContent
		{"bytes=9-1", "bytes=9-1", true},                         // malformed
		{"items=0-1", "items=0-1", true},                         // another unit: ignored downstream
		{"bytes=0-0,200-200,400-400,600-600,800-800", "", false}, // more than the cap of 4
	}
	for _, tc := range cases {
		got, ok := limitRanges(tc.spec, 1000, 4)
		if got != tc.want || ok != tc.ok {
			t.Errorf("limitRanges(%q) = %q, %v; want %q, %v", tc.spec, got, ok, tc.want, tc.ok)
		}
	}
}

func FuzzLimitRanges(f *testing.F) {
	f.Add("bytes=0-1,5-9,-3", int64(100))
	f.Add("bytes=,,,-", int64(1))
	f.Fuzz(func(t *testing.T, spec string, size int64) {
		out, ok := limitRanges(spec, size, 8)
		if ok && out != spec && !strings.HasPrefix(out, "bytes=") {
			t.Fatalf("rewrote %q into %q", spec, out)
		}
		if ok && out != spec && strings.Count(out, ",") >= 8 {
			t.Fatalf("%q kept %d ranges", out, strings.Count(out, ",")+1)
		}
	})
}

// Item 11: the first bytes reach the client while the origin still sends.
func TestFillStreamsBeforeTheBodyEnds(t *testing.T) {
	release := make(chan struct{})
	h, calls := handlerProxy(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=60")
		_, _ = io.WriteString(w, "first part;")
		w.(http.Flusher).Flush()
		<-release
		_, _ = io.WriteString(w, "second part")
	}, nil)
	srv := httptest.NewServer(h)
	defer srv.Close()
	type result struct {
		first string
		rest  string
	}
	results := make(chan result, 2)
	for range 2 {
		go func() {
			resp, err := http.Get(srv.URL + "/trickle")
			if err != nil {
				results <- result{first: err.Error()}
				return
			}
			defer resp.Body.Close()
			buf := make([]byte, len("first part;"))
			_, _ = io.ReadFull(resp.Body, buf)
			results <- result{first: string(buf)}
			rest, _ := io.ReadAll(resp.Body)
			results <- result{rest: string(rest)}
		}()
	}
	for range 2 {
		select {
		case r := <-results:
			if r.first != "first part;" {
				t.Fatalf("first bytes %q", r.first)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("no byte reached the clients while the origin was still sending")
		}
	}
	close(release)
	for range 2 {
		if r := <-results; r.rest != "second part" {
			t.Fatalf("rest %q", r.rest)
		}
	}
	if calls.Load() != 1 {
		t.Fatalf("origin requests = %d, want 1", calls.Load())
	}
}

// Item 8: a request body trickling in is cut off with 408 once its grace
// is over, and the in-flight slots it held do not stop hits.
func TestSlowRequestBodyGets408AndHitsFlow(t *testing.T) {
	h, _ := handlerProxy(t, func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body) // an origin that reads uploads
		w.Header().Set("Cache-Control", "max-age=60")
		_, _ = io.WriteString(w, "ok")
	}, func(c *Config) { c.BodyTimeout = 300 * time.Millisecond; c.MaxInflight = 2 })
	srv := httptest.NewServer(h)
	defer srv.Close()
	if resp, err := http.Get(srv.URL + "/cached"); err == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	h.Wait() // the fill's pump has given its upstream slot back
	statuses := make(chan string, 2)
	for i := range 2 { // as many slow uploads as there are upstream slots
		go func() {
			c, err := net.Dial("tcp", strings.TrimPrefix(srv.URL, "http://"))
			if err != nil {
				statuses <- err.Error()
				return
			}
			defer c.Close()
			fmt.Fprintf(c, "POST /up/%d HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n", i)
			go func() {
				for range 100 {
					if _, err := c.Write([]byte("a")); err != nil {
						return
					}
					time.Sleep(200 * time.Millisecond)
				}
			}()
			_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
			line, _ := bufio.NewReader(c).ReadString('\n')
			statuses <- line
		}()
	}
	waitUntil(t, "both uploads to be read", func() bool { return testutil.ToFloat64(h.metrics.InFlight) == 2 })
	resp, err := http.Get(srv.URL + "/cached")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(resp.Header.Get("Cache-Status"), "hit") {
		t.Fatalf("a hit during slow uploads: %d %q", resp.StatusCode, resp.Header.Get("Cache-Status"))
	}
	// Their bodies are read before they take a slot (upload.go): a miss
	// gets one meanwhile (until 2026-12-05 the uploads held both, and it
	// got 503).
	if n := h.upstream.inFlight(); n != 0 {
		t.Errorf("slow uploads hold %d upstream slots, want 0", n)
	}
	if resp, err := http.Get(srv.URL + "/miss"); err != nil || resp.StatusCode != 200 {
		t.Fatalf("a miss during slow uploads: %v %v, want 200", resp.StatusCode, err)
	} else {
		resp.Body.Close()
	}
	for range 2 {
		if line := <-statuses; !strings.Contains(line, " 408 ") {
			t.Fatalf("slow upload answered %q, want 408", line)
		}
	}
}

// An empty body (a 204, a zero-length 200) is a whole body: it is stored.
func TestEmptyBodyIsStored(t *testing.T) {
	h, calls := handlerProxy(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=60")
		w.WriteHeader(http.StatusNoContent)
	}, nil)
	serve(h, "GET", "/empty")
	if w := serve(h, "GET", "/empty"); w.Code != http.StatusNoContent || calls.Load() != 1 {
		t.Fatalf("second request: %d, %d origin requests; want a stored 204", w.Code, calls.Load())
	}
}

// An origin that answers before a slow upload is complete (and, being
// net/http, first tries to read the rest of the body): the client gets an
// answer once the body's grace is over, not when the upload would end.
func TestEarlyAnswerToSlowUploadIsNotHeldBack(t *testing.T) {
	h, _ := handlerProxy(t, func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed) // never reads the body
	}, func(c *Config) { c.BodyTimeout = 500 * time.Millisecond })
	srv := httptest.NewServer(h)
	defer srv.Close()
	c, err := net.Dial("tcp", strings.TrimPrefix(srv.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "POST /up HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\nabc")
	start := time.Now()
	_ = c.SetReadDeadline(time.Now().Add(4 * time.Second))
	line, _ := bufio.NewReader(c).ReadString('\n')
	if !strings.Contains(line, " 405 ") && !strings.Contains(line, " 408 ") {
		t.Fatalf("got %q after %s, want the origin's 405 or a 408 after the grace", line, time.Since(start))
	}
	t.Logf("%q after %s", strings.TrimSpace(line), time.Since(start).Round(time.Millisecond))
}
