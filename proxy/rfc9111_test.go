package proxy

import (
	"net/http"
	"strings"
	"testing"
	"time"
)

// step is one client request at a moment of the test clock.
type step struct {
	at     time.Duration     // time since t0 when the request is made
	method string            // default GET
	path   string            // default /x
	req    map[string]string // client request fields
	origin *originResp       // if set, the origin answers this from now on
	down   bool              // the origin answers 503 from now on (with no body)

	wantStatus int    // expected status code
	wantOrigin int64  // expected origin requests made by this step
	wantResult string // substring of Cache-Status after "edge; "
	wantBody   string // expected body ("" = don't check)
	wantAge    string // expected Age ("" = don't check)
	wantHeader [2]string
}

// rfcCases read as examples: what the origin says, what the client asks and
// when, and what the cache must do. Section numbers are RFC 9111's unless
// said otherwise.
var rfcCases = []struct {
	name  string
	steps []step
}{
	{"§4.2 fresh max-age response is served from the store with its Age", []step{
		{origin: &originResp{header: map[string]string{"Cache-Control": "max-age=60"}, body: "a"}, wantStatus: 200, wantOrigin: 1, wantResult: "fwd=uri-miss", wantBody: "a"},
		{at: 10 * time.Second, wantStatus: 200, wantOrigin: 0, wantResult: "hit", wantBody: "a", wantAge: "10"},
	}},
	{"§4.3 stale response with ETag is revalidated; the 304's fields update the stored response (§3.2)", []step{
		{origin: &originResp{header: map[string]string{"Cache-Control": "max-age=10", "ETag": `"v1"`, "X-Version": "1"}, body: "a"}, wantOrigin: 1, wantStatus: 200},
		{at: 20 * time.Second, origin: &originResp{header: map[string]string{"Cache-Control": "max-age=10", "ETag": `"v1"`, "X-Version": "2"}, body: "a"},
			wantOrigin: 1, wantStatus: 200, wantResult: "fwd=stale; fwd-status=304", wantBody: "a", wantHeader: [2]string{"X-Version", "2"}},
		{at: 25 * time.Second, wantOrigin: 0, wantResult: "hit", wantHeader: [2]string{"X-Version", "2"}, wantAge: "5"},
	}},
	{"§4.3 stale response with only Last-Modified is revalidated with If-Modified-Since", []step{
		{origin: &originResp{header: map[string]string{"Cache-Control": "max-age=1", "Last-Modified": "Mon, 01 Dec 2025 00:00:00 GMT"}, body: "lm"}, wantOrigin: 1},
		{at: 5 * time.Second, wantOrigin: 1, wantResult: "fwd-status=304", wantBody: "lm"},
	}},
	{"§5.2.2.5 no-store responses are never stored", []step{
		{origin: &originResp{header: map[string]string{"Cache-Control": "no-store"}, body: "x"}, wantOrigin: 1, wantResult: "detail=no-store"},
		{wantOrigin: 1},
	}},
	{"§5.2.2.7 private responses are not stored by a shared cache", []step{
		{origin: &originResp{header: map[string]string{"Cache-Control": "private, max-age=60"}, body: "x"}, wantOrigin: 1, wantResult: "detail=private"},
		{wantOrigin: 1},
	}},
	{"§5.2.2.4 no-cache responses are stored but revalidated on every use", []step{
		{origin: &originResp{header: map[string]string{"Cache-Control": "no-cache", "ETag": `"n"`}, body: "nc"}, wantOrigin: 1, wantResult: "stored"},
		{at: time.Second, wantOrigin: 1, wantResult: "fwd=stale; fwd-status=304", wantBody: "nc"},
	}},
	{"§5.2.2.10 s-maxage overrides max-age in a shared cache", []step{
		{origin: &originResp{header: map[string]string{"Cache-Control": "max-age=0, s-maxage=60"}, body: "s"}, wantOrigin: 1},
		{at: 30 * time.Second, wantOrigin: 0, wantResult: "hit"},
	}},
	{"§5.3 Expires minus Date gives the lifetime", []step{
		{origin: &originResp{header: map[string]string{"Expires": t0.Add(time.Minute).Format(http.TimeFormat)}, body: "e"}, wantOrigin: 1},
		{at: 59 * time.Second, wantOrigin: 0, wantResult: "hit"},
		{at: 61 * time.Second, wantOrigin: 1},
	}},
	{"§5.3 an invalid Expires means already expired", []step{
		{origin: &originResp{header: map[string]string{"Expires": "0", "ETag": `"x"`}, body: "e"}, wantOrigin: 1},
		{at: time.Second, wantOrigin: 1},
	}},
	{"§4.2.2 heuristic freshness is 10 % of Date minus Last-Modified", []step{
		{origin: &originResp{header: map[string]string{"Last-Modified": t0.Add(-10 * time.Hour).Format(http.TimeFormat)}, body: "h"}, wantOrigin: 1},
		{at: 59 * time.Minute, wantOrigin: 0, wantResult: "hit"},
		{at: 61 * time.Minute, wantOrigin: 1},
	}},
	{"§4.2.3 an Age from upstream counts toward the lifetime", []step{
		{origin: &originResp{header: map[string]string{"Cache-Control": "max-age=60", "Age": "50"}, body: "a"}, wantOrigin: 1, wantAge: "50"},
		{at: 5 * time.Second, wantOrigin: 0, wantAge: "55"},
		{at: 11 * time.Second, wantOrigin: 1},
	}},
	{"§4.2.1 a malformed max-age makes the response stale", []step{
		{origin: &originResp{header: map[string]string{"Cache-Control": "max-age=abc"}, body: "m"}, wantOrigin: 1},
		{at: time.Second, wantOrigin: 1},
	}},
	{"§4.1 Vary selects variants by the named request fields", []step{
		{req: map[string]string{"Accept-Language": "en"}, origin: &originResp{header: map[string]string{"Cache-Control": "max-age=60", "Vary": "Accept-Language"}, body: "v"}, wantOrigin: 1},
		{req: map[string]string{"Accept-Language": "fr"}, wantOrigin: 1, wantResult: "fwd=vary-miss"},
		{req: map[string]string{"Accept-Language": "en"}, wantOrigin: 0, wantResult: "hit"},
		{req: map[string]string{"Accept-Language": "fr"}, wantOrigin: 0, wantResult: "hit"},
	}},
	{"§4.1 Vary: * is never served from the store", []step{
		{origin: &originResp{header: map[string]string{"Cache-Control": "max-age=60", "Vary": "*"}, body: "v"}, wantOrigin: 1, wantResult: "detail=vary-star"},
		{wantOrigin: 1},
	}},
	{"Set-Cookie responses are not stored by default", []step{
		{origin: &originResp{header: map[string]string{"Cache-Control": "max-age=60", "Set-Cookie": "a=b"}, body: "c"}, wantOrigin: 1, wantHeader: [2]string{"Set-Cookie", "a=b"}},
		{wantOrigin: 1},
	}},
	{"§3.5 a response to a request with Authorization is not stored unless public", []step{
		{req: map[string]string{"Authorization": "Basic eDp5"}, origin: &originResp{header: map[string]string{"Cache-Control": "max-age=60"}, body: "secret"}, wantOrigin: 1},
		{req: map[string]string{"Authorization": "Basic eDp5"}, wantOrigin: 1},
		{wantOrigin: 1},
	}},
	{"§3.5 public allows storing a response to an authorized request", []step{
		{req: map[string]string{"Authorization": "Basic eDp5"}, origin: &originResp{header: map[string]string{"Cache-Control": "public, max-age=60"}, body: "p"}, wantOrigin: 1},
		{wantOrigin: 0, wantResult: "hit"},
	}},
	{"§5.2.1.1 request max-age=0 forces validation", []step{
		{origin: &originResp{header: map[string]string{"Cache-Control": "max-age=60", "ETag": `"a"`}, body: "r"}, wantOrigin: 1},
		{at: time.Second, req: map[string]string{"Cache-Control": "max-age=0"}, wantOrigin: 1, wantResult: "fwd-status=304"},
	}},
	{"§5.4 Pragma: no-cache without Cache-Control forces validation", []step{
		{origin: &originResp{header: map[string]string{"Cache-Control": "max-age=60", "ETag": `"a"`}, body: "r"}, wantOrigin: 1},
		{req: map[string]string{"Pragma": "no-cache"}, wantOrigin: 1, wantResult: "fwd=request"},
	}},
	{"§5.2.1.3 request min-fresh rejects responses about to expire", []step{
		{origin: &originResp{header: map[string]string{"Cache-Control": "max-age=60"}, body: "r"}, wantOrigin: 1},
		{at: 50 * time.Second, req: map[string]string{"Cache-Control": "min-fresh=20"}, wantOrigin: 1},
	}},
	{"§5.2.1.2 request max-stale accepts a stale response", []step{
		{origin: &originResp{header: map[string]string{"Cache-Control": "max-age=10"}, body: "r"}, wantOrigin: 1},
		{at: 30 * time.Second, req: map[string]string{"Cache-Control": "max-stale=60"}, wantOrigin: 0, wantResult: "hit; detail=stale"},
	}},
	{"§5.2.1.7 only-if-cached answers 504 on a miss without asking the origin", []step{
		{req: map[string]string{"Cache-Control": "only-if-cached"}, wantOrigin: 0, wantStatus: 504},
	}},
	{"RFC 5861 stale-while-revalidate serves stale and refreshes once in the background", []step{
		{origin: &originResp{header: map[string]string{"Cache-Control": "max-age=1, stale-while-revalidate=60", "ETag": `"s"`}, body: "swr"}, wantOrigin: 1},
		{at: 5 * time.Second, wantOrigin: 1, wantResult: "detail=stale-while-revalidate", wantBody: "swr"},
		{at: 5500 * time.Millisecond, wantOrigin: 0, wantResult: "hit"},
	}},
	{"RFC 5861 stale-if-error serves stale when the origin answers 5xx", []step{
		{origin: &originResp{header: map[string]string{"Cache-Control": "max-age=1, stale-if-error=60"}, body: "sie"}, wantOrigin: 1},
		{at: 30 * time.Second, down: true, wantOrigin: 1, wantStatus: 200, wantBody: "sie", wantResult: "detail=origin-error"},
	}},
	{"must-revalidate forbids serving stale when the origin fails", []step{
		{origin: &originResp{header: map[string]string{"Cache-Control": "max-age=1, must-revalidate"}, body: "mr"}, wantOrigin: 1},
		{at: 30 * time.Second, down: true, wantOrigin: 1, wantStatus: 503},
	}},
	{"RFC 9213 CDN-Cache-Control overrides Cache-Control for this cache", []step{
		{origin: &originResp{header: map[string]string{"Cache-Control": "no-store", "CDN-Cache-Control": "max-age=60"}, body: "cdn"}, wantOrigin: 1},
		{at: 10 * time.Second, wantOrigin: 0, wantResult: "hit", wantHeader: [2]string{"Cache-Control", "no-store"}},
	}},
	{"§4.4 a successful POST invalidates the target URI", []step{
		{origin: &originResp{header: map[string]string{"Cache-Control": "max-age=60"}, body: "g"}, wantOrigin: 1},
		{method: "POST", wantOrigin: 1, wantResult: "fwd=bypass"},
		{wantOrigin: 1, wantResult: "fwd=uri-miss"},
	}},
	{"§4.4 a successful PUT invalidates the Location URI on the same host", []step{
		{path: "/other", origin: &originResp{header: map[string]string{"Cache-Control": "max-age=60"}, body: "o"}, wantOrigin: 1},
		{method: "PUT", origin: &originResp{header: map[string]string{"Location": "/other"}}, wantOrigin: 1},
		{path: "/other", wantOrigin: 1},
	}},
	{"HEAD is answered from the stored GET response", []step{
		{origin: &originResp{header: map[string]string{"Cache-Control": "max-age=60"}, body: "body"}, wantOrigin: 1},
		{method: "HEAD", wantOrigin: 0, wantResult: "hit", wantBody: "-"},
	}},
	{"RFC 9110 §13 a client conditional on a hit gets 304", []step{
		{origin: &originResp{header: map[string]string{"Cache-Control": "max-age=60", "ETag": `"c"`}, body: "body"}, wantOrigin: 1},
		{req: map[string]string{"If-None-Match": `"c"`}, wantOrigin: 0, wantStatus: 304},
		{req: map[string]string{"If-None-Match": `"other"`}, wantOrigin: 0, wantStatus: 200},
	}},
	{"RFC 9110 §14 a range on a hit is served from the stored full response", []step{
		{origin: &originResp{header: map[string]string{"Cache-Control": "max-age=60", "ETag": `"r"`}, body: "0123456789"}, wantOrigin: 1},
		{req: map[string]string{"Range": "bytes=2-4"}, wantOrigin: 0, wantStatus: 206, wantBody: "234"},
		{req: map[string]string{"Range": "bytes=50-60"}, wantOrigin: 0, wantStatus: 416},
	}},
	{"a range miss fetches and stores the full response", []step{
		{req: map[string]string{"Range": "bytes=0-1"}, origin: &originResp{header: map[string]string{"Cache-Control": "max-age=60"}, body: "abcdef"}, wantOrigin: 1, wantStatus: 206, wantBody: "ab"},
		{wantOrigin: 0, wantStatus: 200, wantBody: "abcdef"},
	}},
	{"responses without freshness and a non-heuristic status are not stored", []step{
		{origin: &originResp{status: 302, header: map[string]string{"Location": "/y"}}, wantOrigin: 1, wantStatus: 302},
		{wantOrigin: 1},
	}},
	{"a cacheable 404 is stored", []step{
		{origin: &originResp{status: 404, header: map[string]string{"Cache-Control": "max-age=60"}, body: "nf"}, wantOrigin: 1, wantStatus: 404},
		{wantOrigin: 0, wantStatus: 404, wantResult: "hit"},
	}},
}

func TestRFC9111Examples(t *testing.T) {
	for _, tc := range rfcCases {
		t.Run(tc.name, func(t *testing.T) {
			p := newTestProxy(t, nil)
			for i, s := range tc.steps {
				p.clk.Set(t0.Add(s.at))
				if s.origin != nil {
					p.origin.set(*s.origin)
				}
				if s.down {
					p.origin.set(originResp{status: 503})
				}
				method, path := s.method, s.path
				if method == "" {
					method = "GET"
				}
				if path == "" {
					path = "/x"
				}
				before := p.origin.calls.Load()
				w := p.do(method, path, s.req)
				got := p.origin.calls.Load() - before
				cs := w.Header().Get("Cache-Status")
				if got != s.wantOrigin {
					t.Errorf("step %d: origin requests = %d, want %d (Cache-Status %q)", i, got, s.wantOrigin, cs)
				}
				if s.wantStatus != 0 && w.Code != s.wantStatus {
					t.Errorf("step %d: status = %d, want %d (Cache-Status %q)", i, w.Code, s.wantStatus, cs)
				}
				if s.wantResult != "" && !strings.Contains(cs, s.wantResult) {
					t.Errorf("step %d: Cache-Status = %q, want it to contain %q", i, cs, s.wantResult)
				}
				if s.wantBody == "-" && w.Body.Len() != 0 {
					t.Errorf("step %d: body = %q, want none", i, w.Body.String())
				} else if s.wantBody != "" && s.wantBody != "-" && w.Body.String() != s.wantBody {
					t.Errorf("step %d: body = %q, want %q", i, w.Body.String(), s.wantBody)
				}
				if s.wantAge != "" && w.Header().Get("Age") != s.wantAge {
					t.Errorf("step %d: Age = %q, want %q", i, w.Header().Get("Age"), s.wantAge)
				}
				if s.wantHeader[0] != "" && w.Header().Get(s.wantHeader[0]) != s.wantHeader[1] {
					t.Errorf("step %d: %s = %q, want %q", i, s.wantHeader[0], w.Header().Get(s.wantHeader[0]), s.wantHeader[1])
				}
				if !strings.HasPrefix(cs, "edge; ") {
					t.Errorf("step %d: Cache-Status %q does not name the cache", i, cs)
				}
				if !strings.Contains(w.Header().Get("Via"), "1.1 edge") {
					t.Errorf("step %d: Via = %q", i, w.Header().Get("Via"))
				}
			}
		})
	}
}

func TestEdgeHeadersNeverReachOrigin(t *testing.T) {
	p := newTestProxy(t, nil)
	p.origin.set(originResp{header: map[string]string{"Cache-Control": "max-age=60"}, body: "e"})
	p.do("GET", "/e", map[string]string{"Edge-Hop": "9", "Edge-Route": "x"})
	p.origin.mu.Lock()
	defer p.origin.mu.Unlock()
	for k := range p.origin.last {
		if strings.HasPrefix(strings.ToLower(k), "edge-") {
			t.Errorf("origin saw %s", k)
		}
	}
}

func TestStaleIfErrorOnConnectError(t *testing.T) {
	p := newTestProxy(t, nil)
	p.origin.set(originResp{header: map[string]string{"Cache-Control": "max-age=1"}, body: "cached"})
	p.do("GET", "/x", nil)
	p.origin.srv.Close() // connections are now refused
	p.clk.Set(t0.Add(time.Minute))
	w := p.do("GET", "/x", nil)
	if w.Code != 200 || w.Body.String() != "cached" {
		t.Fatalf("got %d %q, want the stale response (default stale_if_error window)", w.Code, w.Body.String())
	}
	p.clk.Set(t0.Add(time.Hour))
	w = p.do("GET", "/x", nil)
	if w.Code != http.StatusBadGateway {
		t.Fatalf("beyond the window: got %d, want 502", w.Code)
	}
}

func TestLargeObjectStreamedNotStored(t *testing.T) {
	p := newTestProxy(t, func(c *Config) { c.MaxObjectBytes = 1000 })
	big := strings.Repeat("z", 5000)
	p.origin.set(originResp{header: map[string]string{"Cache-Control": "max-age=60"}, body: big})
	w := p.do("GET", "/big", nil)
	if w.Body.String() != big {
		t.Fatalf("body length %d, want %d", w.Body.Len(), len(big))
	}
	if p.h.Store().Stats().Objects != 0 {
		t.Errorf("stored %d objects, want 0", p.h.Store().Stats().Objects)
	}
	// The body had no Content-Length, so the first answer could not know;
	// the URL is now known to be too large and passes straight through.
	w = p.do("GET", "/big", nil)
	if w.Body.String() != big || !strings.Contains(w.Header().Get("Cache-Status"), "too-large") {
		t.Errorf("second request: Cache-Status = %q, %d bytes", w.Header().Get("Cache-Status"), w.Body.Len())
	}
	if p.h.Store().Stats().Objects != 0 {
		t.Errorf("stored %d objects, want 0", p.h.Store().Stats().Objects)
	}
}

func TestLimits(t *testing.T) {
	p := newTestProxy(t, func(c *Config) { c.MaxURLBytes = 100; c.MaxBodyBytes = 10 })
	w := p.do("GET", "/"+strings.Repeat("a", 200), nil)
	if w.Code != http.StatusRequestURITooLong {
		t.Errorf("long URL: %d, want 414", w.Code)
	}
	req := httptestRequestWithBody("POST", "/x", strings.Repeat("b", 100))
	rec := newRecorder()
	p.h.ServeHTTP(rec, req)
	if rec.Code != http.StatusRequestEntityTooLarge {
		t.Errorf("big body: %d, want 413", rec.Code)
	}
}

func TestSoftPurgeRevalidates(t *testing.T) {
	p := newTestProxy(t, nil)
	p.origin.set(originResp{header: map[string]string{"Cache-Control": "max-age=60", "ETag": `"p"`}, body: "x"})
	p.do("GET", "/x", nil)
	n, err := p.h.Purge(PurgeRequest{URL: "http://example.com/x", Soft: true})
	if err != nil || n != 1 {
		t.Fatalf("soft purge = %d, %v", n, err)
	}
	w := p.do("GET", "/x", nil)
	if !strings.Contains(w.Header().Get("Cache-Status"), "fwd-status=304") {
		t.Errorf("after soft purge: %q, want a revalidation", w.Header().Get("Cache-Status"))
	}
	n, _ = p.h.Purge(PurgeRequest{Prefix: "/x"})
	if n != 1 {
		t.Errorf("prefix purge removed %d, want 1", n)
	}
	if w := p.do("GET", "/x", nil); !strings.Contains(w.Header().Get("Cache-Status"), "uri-miss") {
		t.Errorf("after hard purge: %q", w.Header().Get("Cache-Status"))
	}
}

func TestPurgeBySurrogateKey(t *testing.T) {
	p := newTestProxy(t, nil)
	p.origin.set(originResp{header: map[string]string{"Cache-Control": "max-age=60", "Surrogate-Key": "news front"}, body: "x"})
	p.do("GET", "/a", nil)
	p.do("GET", "/b", nil)
	p.origin.set(originResp{header: map[string]string{"Cache-Control": "max-age=60", "Cache-Tag": "sports"}, body: "y"})
	p.do("GET", "/c", nil)
	if n, _ := p.h.Purge(PurgeRequest{Tag: "front"}); n != 2 {
		t.Errorf("purge tag front = %d, want 2", n)
	}
	if n, _ := p.h.Purge(PurgeRequest{Tag: "sports"}); n != 1 {
		t.Errorf("purge tag sports = %d, want 1", n)
	}
	if _, err := p.h.Purge(PurgeRequest{}); err == nil {
		t.Error("empty purge request accepted")
	}
	if _, err := p.h.Purge(PurgeRequest{URL: "not a url"}); err == nil {
		t.Error("relative purge URL accepted")
	}
}

func TestSurrogateControlTargeting(t *testing.T) {
	cases := []struct {
		sc     string
		cached bool
	}{
		{"max-age=60", true},
		{"max-age=60;edge", true},
		{"max-age=60;other", false},
		{"no-store, max-age=60", false},
	}
	for _, tc := range cases {
		p := newTestProxy(t, nil)
		p.origin.set(originResp{header: map[string]string{"Cache-Control": "no-store", "Surrogate-Control": tc.sc}, body: "s"})
		p.do("GET", "/s", nil)
		p.clk.Set(t0.Add(time.Second))
		before := p.origin.calls.Load()
		p.do("GET", "/s", nil)
		if cached := p.origin.calls.Load() == before; cached != tc.cached {
			t.Errorf("Surrogate-Control %q: cached %v, want %v", tc.sc, cached, tc.cached)
		}
		p.origin.mu.Lock()
		capab := p.origin.last.Get("Surrogate-Capability")
		p.origin.mu.Unlock()
		if tc.cached == false && capab != `edge="Surrogate/1.0"` {
			t.Errorf("Surrogate-Capability %q", capab)
		}
	}
}

func TestMustUnderstand(t *testing.T) {
	p := newTestProxy(t, nil)
	p.origin.set(originResp{status: 599, header: map[string]string{"Cache-Control": "max-age=60, must-understand"}, body: "x"})
	if w := p.do("GET", "/m", nil); !strings.Contains(w.Header().Get("Cache-Status"), "detail=must-understand") {
		t.Errorf("unknown status stored: %q", w.Header().Get("Cache-Status"))
	}
	if p.h.Store().Stats().Objects != 0 {
		t.Error("a 599 with must-understand was stored")
	}
	p.origin.set(originResp{header: map[string]string{"Cache-Control": "max-age=60, must-understand, no-store"}, body: "y"})
	p.do("GET", "/n", nil)
	if w := p.do("GET", "/n", nil); w.Header().Get("Cache-Status") != "edge; hit" {
		t.Errorf("must-understand with a known status must override no-store: %q", w.Header().Get("Cache-Status"))
	}
}

// TestAgeFirstValueAndInvalidIgnored holds RFC 9111 §5.1: a repeated or
// list-valued Age uses its first value, and an Age that is not a
// non-negative integer is ignored (it does not make the response stale).
func TestAgeFirstValueAndInvalidIgnored(t *testing.T) {
	for _, tc := range []struct {
		in   []string
		want time.Duration
		ok   bool
	}{
		{[]string{"10"}, 10 * time.Second, true},
		{[]string{" 10 "}, 10 * time.Second, true},
		{[]string{"0"}, 0, true},
		{[]string{"99999999999999999999999"}, maxDeltaSeconds * time.Second, true}, // saturates (§1.2.2)
		{[]string{"10, 20"}, 10 * time.Second, true},                               // a list: the first value
		{[]string{"0,7200"}, 0, true},
		{[]string{"7200", "0"}, 7200 * time.Second, true}, // repeated: the first line
		{[]string{"-1"}, 0, false},
		{[]string{"abc"}, 0, false},
		{[]string{""}, 0, false},
		{[]string{"1.5"}, 0, false},
		{[]string{"7200;foo=bar"}, 0, false},
		{[]string{"abc, 10"}, 0, false}, // the first value is invalid: the field is ignored
		{nil, 0, false},
	} {
		got, ok := ParseAge(http.Header{"Age": tc.in})
		if ok != tc.ok || got != tc.want {
			t.Errorf("Age %q = %v, %v; want %v, %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
	for age, fresh := range map[string]bool{"abc": true, "-1": true, "1.0": true, "0, 7200": true, "5;x=y": true, "7200": false, "7200, 0": false} {
		p := newTestProxy(t, nil)
		p.origin.set(originResp{header: map[string]string{"Cache-Control": "max-age=3600", "Age": age}, body: "a"})
		p.do("GET", "/a", nil)
		if hit := p.do("GET", "/a", nil).Header().Get("Cache-Status") == "edge; hit"; hit != fresh {
			t.Errorf("Age %q: served from the store %v, want %v", age, hit, fresh)
		}
	}
}

// TestExpiresGrammar holds RFC 9111 §5.3 with RFC 9110 §5.6.7's grammar:
// the three date forms are accepted exactly; anything else (wrong widths,
// extra spaces, lower-case names, out-of-range fields) is an invalid date,
// which makes the response already expired.
func TestExpiresGrammar(t *testing.T) {
	want := time.Date(1994, 11, 6, 8, 49, 37, 0, time.UTC)
	for _, s := range []string{
		"Sun, 06 Nov 1994 08:49:37 GMT",  // IMF-fixdate
		"Sunday, 06-Nov-94 08:49:37 GMT", // rfc850-date
		"Sun Nov  6 08:49:37 1994",       // asctime-date
	} {
		if got, ok := parseHTTPDate(s); !ok || !got.Equal(want) {
			t.Errorf("%q = %v, %v", s, got, ok)
		}
	}
	for _, s := range []string{
		"Sun, 6 Nov 1994 08:49:37 GMT",   // one-digit day
		"Sun, 06 Nov 94 08:49:37 GMT",    // two-digit year in IMF-fixdate
		"Sun, 06 Nov 1994 8:49:37 GMT",   // one-digit hour
		"Sun,  06 Nov 1994 08:49:37 GMT", // two spaces
		"Sun, 06 Nov 1994 08:49:37 GMT ", // trailing junk after trimming? no: this one trims, see below
		"sun, 06 Nov 1994 08:49:37 GMT",  // lower-case day name
		"Sun, 06 nov 1994 08:49:37 GMT",  // lower-case month
		"Sun, 06 Nov 1994 08:49:37 UTC",  // not GMT
		"Sun, 06 Nov 1994 08:49:37 gmt",
		"Sun, 06 Nov 1994 24:00:00 GMT", // hour out of range
		"Sun, 31 Feb 1994 08:49:37 GMT", // no such day
		"Sun, 06 Nov 1994 08:60:37 GMT",
		"Sund, 06 Nov 1994 08:49:37 GMT",
		"Sun, 06-Nov-1994 08:49:37 GMT",
		"Sunday, 06 Nov 94 08:49:37 GMT",
		"Sun Nov 06 08:49:37 1994", // asctime pads with a space
		"Sun Nov 6 08:49:37 1994",
		"0", "-1", "", "Thu, 01 Jan 1970 00:00:00 GMT extra", "1994-11-06T08:49:37Z",
	} {
		if strings.TrimSpace(s) == "Sun, 06 Nov 1994 08:49:37 GMT" {
			continue // surrounding whitespace is OWS, not part of the value
		}
		if got, ok := parseHTTPDate(s); ok {
			t.Errorf("%q accepted as %v", s, got)
		}
	}
	for exp, fresh := range map[string]bool{
		"Sat, 03 Jan 2026 03:04:05 GMT": true, // a day after the test clock's Date
		"Sat, 3 Jan 2026 03:04:05 GMT":  false,
		"Sat, 03 Jan 2026 3:04:05 GMT":  false,
		"0":                             false,
		"sat, 03 Jan 2026 03:04:05 GMT": false,
	} {
		p := newTestProxy(t, nil)
		p.origin.set(originResp{header: map[string]string{"Expires": exp, "ETag": `"e"`}, body: "a"})
		p.do("GET", "/e", nil)
		p.clk.Set(t0.Add(time.Second))
		if hit := p.do("GET", "/e", nil).Header().Get("Cache-Status") == "edge; hit"; hit != fresh {
			t.Errorf("Expires %q: fresh %v, want %v", exp, hit, fresh)
		}
	}
}

// TestCDNCacheControlIsAStructuredDictionary holds RFC 9213 §2.1: the
// targeted field is a Structured Field Dictionary; when it does not parse,
// or a directive has the wrong type, the whole field is ignored and
// Cache-Control applies.
func TestCDNCacheControlIsAStructuredDictionary(t *testing.T) {
	for _, tc := range []struct {
		cdn  string
		used bool // the targeted field applies (else Cache-Control: no-store does)
	}{
		{"max-age=60", true},
		{"max-age=60, stale-while-revalidate=10", true},
		{"max-age=60, public", true},
		{"max-age=60;foo=1", true},            // parameters are allowed
		{"max-age=60, x-unknown=\"a\"", true}, // unknown directives of any type
		{"max-age=60, public=?0", true},       // a false Boolean is absent
		{`max-age="60"`, false},               // a String where an Integer belongs
		{"max-age=60.0", false},               // a Decimal
		{"max-age=-1", false},
		{"max-age=60, no-store=1", false}, // an Integer where a Boolean belongs
		{"max-age=60,,", false},           // does not parse
		{"Max-Age=60", false},             // keys are lower-case
		{"max-age=60 public", false},
		{"max-age=(60)", false}, // an Inner List
		{"", false},             // empty: absent
	} {
		p := newTestProxy(t, nil)
		p.origin.set(originResp{header: map[string]string{"Cache-Control": "no-store", "CDN-Cache-Control": tc.cdn}, body: "c"})
		p.do("GET", "/c", nil)
		p.clk.Set(t0.Add(time.Second))
		if hit := p.do("GET", "/c", nil).Header().Get("Cache-Status") == "edge; hit"; hit != tc.used {
			t.Errorf("CDN-Cache-Control %q: stored and fresh %v, want %v", tc.cdn, hit, tc.used)
		}
	}
	cc, ok := parseTargeted(http.Header{"Cdn-Cache-Control": {`no-cache="set-cookie", private=("a" "b"), s-maxage=99999999999`}}, "Cdn-Cache-Control")
	if !ok || !cc.NoCacheFields || !cc.PrivateFields || cc.SMaxAge != maxDeltaSeconds {
		t.Errorf("qualified no-cache/private and a saturated s-maxage: %+v %v", cc, ok)
	}
}

// TestInterimResponsesAreNeverStored holds that a 1xx is never stored or
// reused: an origin sends 103 Early Hints (with fields that must not stick
// to the final response) before its 200.
func TestInterimResponsesAreNeverStored(t *testing.T) {
	for code := 100; code < 200; code++ {
		if ok, _ := (&Policy{}).storable(http.MethodGet, CacheControl{MaxAge: unset, SMaxAge: unset}, false, code, http.Header{"Cache-Control": {"max-age=60"}}, CacheControl{MaxAge: 60, SMaxAge: unset}, false); ok {
			t.Fatalf("status %d storable", code)
		}
	}
	p := newTestProxy(t, nil)
	p.origin.srv.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Link", "</style.css>; rel=preload")
		w.Header().Set("X-Hint", "interim")
		w.WriteHeader(http.StatusEarlyHints)
		w.Header().Del("X-Hint")
		w.Header().Set("Cache-Control", "max-age=60")
		_, _ = w.Write([]byte("final"))
	})
	for i := range 2 {
		w := p.do("GET", "/h", nil)
		if w.Code != 200 || w.Body.String() != "final" || w.Header().Get("X-Hint") != "" {
			t.Fatalf("request %d: %d %q X-Hint %q", i, w.Code, w.Body.String(), w.Header().Get("X-Hint"))
		}
	}
	if n := p.h.Store().Stats().Objects; n != 1 {
		t.Errorf("%d stored objects, want the final response alone", n)
	}
}

// FuzzHTTPDate checks that the strict date parser never panics and that
// whatever it accepts formats back to an IMF-fixdate it accepts too.
func FuzzHTTPDate(f *testing.F) {
	for _, s := range []string{"Sun, 06 Nov 1994 08:49:37 GMT", "Sunday, 06-Nov-94 08:49:37 GMT", "Sun Nov  6 08:49:37 1994", "Sun, 31 Feb 1994 08:49:37 GMT", "Mon, 99 Xyz 0000 99:99:99 GMT"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, ok := parseHTTPDate(s)
		if !ok {
			return
		}
		back := d.UTC().Format(http.TimeFormat)
		if d2, ok2 := parseHTTPDate(back); !ok2 || !d2.Equal(d) {
			t.Fatalf("%q → %v → %q does not parse back", s, d, back)
		}
	})
}

// FuzzTargeted checks that no targeted field makes the parser panic or
// produce a negative delta.
func FuzzTargeted(f *testing.F) {
	for _, s := range []string{"max-age=60", `max-age="60"`, "no-cache=(\"a\")", "s-maxage=999999999999999", "a=?1;b, max-age=1", ",,", "max-age=-1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		cc, ok := parseTargeted(http.Header{"Cdn-Cache-Control": {s}}, "Cdn-Cache-Control")
		if !ok {
			return
		}
		for _, v := range []int{cc.MaxAge, cc.SMaxAge, cc.StaleWhile, cc.StaleIfError} {
			if v < unset || v > maxDeltaSeconds {
				t.Fatalf("%q gave a delta of %d", s, v)
			}
		}
	})
}
