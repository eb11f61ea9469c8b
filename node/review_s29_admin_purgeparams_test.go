package node

import (
	"strings"
	"testing"
)

// s29Cached fills path on shop.test and reports whether a second request
// is answered without the origin.
func s29Cached(t *testing.T, n *s7Node, o *s7Origin, path string) bool {
	t.Helper()
	before := o.calls.Load()
	if code, _ := n.get("shop.test", path); code != 200 {
		t.Fatalf("GET %s: %d", path, code)
	}
	return o.calls.Load() == before
}

// A review found (now mended: proxy.CheckPurgeQuery): the admin purge reads each parameter with url.Values.Get, so a
// repeated selector or one it does not know is silently dropped and the
// purge still answers 200. An operator's script that purges two pages in
// one call, POST /purge?url=http://shop.test/a&url=http://shop.test/b,
// gets {"purged":1,…} and 200, and /b is still served from the cache. The
// README's own example writes the URL unencoded
// (purge?url=http://127.0.0.1:8080/p/42): a page with a query,
// POST /purge?url=http://shop.test/search?q=x&page=2, purges
// /search?q=x (a different page) and leaves /search?q=x&page=2 cached,
// again with 200; and POST /purge?url=http://shop.test/search?q=a+b is read
// as ".../search?q=a b" (a URL with a space, which no request can name),
// purges nothing and answers 200. The project refuses soft=yes and prefix=img/ for this
// very reason (TestPurgeRefusesWhatItWouldMisread: "what it would
// misread"). Expected: a repeated url/prefix/tag/soft, a parameter the
// endpoint does not know, or a url/prefix that is no request target (a
// space in it) is refused with 400 naming it, and nothing is purged.
func TestS29AdminPurgeRefusesParametersItWouldDrop(t *testing.T) {
	o := newS7Origin(t, "A")
	n := startS7Node(t, "sites:\n"+s7Site("shop", []string{"shop.test"}, []string{o.URL}, ""))
	pages := []string{"/a", "/b", "/search?q=x", "/search?q=x&page=2", "/search?q=a+b"}
	for _, p := range pages {
		n.get("shop.test", p)
	}
	n.Proxy().Wait()
	for _, p := range pages {
		if !s29Cached(t, n, o, p) {
			t.Fatalf("%s is not cached", p)
		}
	}
	// Two pages in one call.
	code, body := n.admin("POST", "/purge?url=http://shop.test/a&url=http://shop.test/b")
	t.Logf("purge url=/a&url=/b: %d %s", code, strings.TrimSpace(body))
	if code == 200 && s29Cached(t, n, o, "/b") {
		t.Errorf("POST /purge?url=http://shop.test/a&url=http://shop.test/b answered 200 %s, but /b is still served from the cache: the second url= was dropped without a word", strings.TrimSpace(body))
	}
	// A page with a query, written as the README writes URLs.
	code, body = n.admin("POST", "/purge?url=http://shop.test/search?q=x&page=2")
	t.Logf("purge url=/search?q=x&page=2 (unencoded): %d %s", code, strings.TrimSpace(body))
	if code == 200 && s29Cached(t, n, o, "/search?q=x&page=2") {
		t.Errorf("POST /purge?url=http://shop.test/search?q=x&page=2 answered 200 %s and left /search?q=x&page=2 cached (it purged /search?q=x instead): the unknown parameter page= was dropped without a word", strings.TrimSpace(body))
	}
	// A '+' in the page's query, written the same way: the admin query
	// decodes it to a space, and a URL with a space names no request.
	code, body = n.admin("POST", "/purge?url=http://shop.test/search?q=a+b")
	t.Logf("purge url=/search?q=a+b (unencoded): %d %s", code, strings.TrimSpace(body))
	if code == 200 && s29Cached(t, n, o, "/search?q=a+b") {
		t.Errorf("POST /purge?url=http://shop.test/search?q=a+b answered 200 %s and left /search?q=a+b cached: the '+' was read as a space (a URL no request can name) without a word", strings.TrimSpace(body))
	}
}

// TestS29AdminPurgeNeedsTheBearerToken: the purge and reload endpoints
// refuse every way of asking without the token in an Authorization:
// Bearer field (no token, wrong token, the token as Basic password, as a
// query parameter, a cookie or another field, other methods and path
// spellings), and nothing is purged.
func TestS29AdminPurgeNeedsTheBearerToken(t *testing.T) {
	o := newS7Origin(t, "A")
	n := startS7Node(t, "sites:\n"+s7Site("shop", []string{"shop.test"}, []string{o.URL}, ""))
	n.get("shop.test", "/p")
	n.Proxy().Wait()
	if !s29Cached(t, n, o, "/p") {
		t.Fatal("/p is not cached")
	}
	q := "?url=http://shop.test/p"
	asks := []string{
		"POST /purge" + q + " HTTP/1.1\r\nHost: x\r\n",
		"POST /purge" + q + " HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer wrong\r\n",
		"POST /purge" + q + " HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + s7Token + "x\r\n",
		"POST /purge" + q + " HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + s7Token[:len(s7Token)-1] + "\r\n",
		"POST /purge" + q + " HTTP/1.1\r\nHost: x\r\nAuthorization: Basic " + basic("u:"+s7Token) + "\r\n",
		"POST /purge" + q + "&token=" + s7Token + " HTTP/1.1\r\nHost: x\r\n",
		"POST /purge" + q + "&access_token=" + s7Token + " HTTP/1.1\r\nHost: x\r\n",
		"POST /purge" + q + " HTTP/1.1\r\nHost: x\r\nCookie: token=" + s7Token + "\r\n",
		"POST /purge" + q + " HTTP/1.1\r\nHost: x\r\nX-Admin-Token: " + s7Token + "\r\n",
		"POST /purge" + q + " HTTP/1.1\r\nHost: x\r\nAuthorization: " + s7Token + "\r\n",
		"POST /purge" + q + " HTTP/1.1\r\nHost: x\r\nAuthorization: Token " + s7Token + "\r\n",
		"GET /purge" + q + " HTTP/1.1\r\nHost: x\r\n",
		"PURGE /purge" + q + " HTTP/1.1\r\nHost: x\r\n",
		"POST //purge" + q + " HTTP/1.1\r\nHost: x\r\n",
		"POST /%70urge" + q + " HTTP/1.1\r\nHost: x\r\n",
		"POST /purge/" + q + " HTTP/1.1\r\nHost: x\r\n",
		"POST /status/../purge" + q + " HTTP/1.1\r\nHost: x\r\n",
		"POST /./purge" + q + " HTTP/1.1\r\nHost: x\r\n",
		"POST /PURGE" + q + " HTTP/1.1\r\nHost: x\r\n",
		"POST http://x/purge" + q + " HTTP/1.1\r\nHost: x\r\n",
		"POST /reload HTTP/1.1\r\nHost: x\r\n",
		"POST /reload HTTP/1.1\r\nHost: x\r\nAuthorization: Basic " + basic("admin:"+s7Token) + "\r\n",
		"POST //reload HTTP/1.1\r\nHost: x\r\n",
		"POST /cluster/keys?op=install HTTP/1.1\r\nHost: x\r\n",
		"GET /debug/pprof/cmdline HTTP/1.1\r\nHost: x\r\n",
		"GET /debug/pprof/goroutine?debug=2 HTTP/1.1\r\nHost: x\r\n",
		"GET //debug/pprof/goroutine?debug=2 HTTP/1.1\r\nHost: x\r\n",
	}
	for _, a := range asks {
		resp, body := rawAsk(t, n.adm, a+"Content-Length: 0\r\nConnection: close\r\n\r\n")
		line, _, _ := strings.Cut(a, "\r\n")
		if resp.StatusCode < 400 {
			t.Errorf("%q (no valid Bearer token): %d %q", line, resp.StatusCode, body)
		}
		if strings.Contains(body, `"purged"`) || strings.Contains(body, `"hash"`) || strings.Contains(body, "goroutine ") {
			t.Errorf("%q acted without the token: %q", line, body)
		}
	}
	if !s29Cached(t, n, o, "/p") {
		t.Error("/p was purged by a request without the token")
	}
	// And the token does purge (the test's requests reach the endpoint).
	if code, body := n.admin("POST", "/purge"+q); code != 200 || !strings.Contains(body, `"purged":1`) {
		t.Fatalf("purge with the token: %d %s", code, body)
	}
	if s29Cached(t, n, o, "/p") {
		t.Error("/p still cached after a purge with the token")
	}
}

// A review found (now mended: proxy.CheckPurgeQuery, proxy.PurgeLocal): local= is read as "1" or not at all. POST /purge?url=…&local=true
// (the spelling soft= accepts) is taken as a cluster-wide purge: it goes
// to every peer ("peers_purged", or "peers_owed" and delivered later) where the operator asked for this
// node alone, the reverse of soft=yes, which CheckSoft now refuses for
// the same reason ("a spelling this reads as" something else). Expected:
// local= takes the spellings soft= takes (1/true, 0/false), and any other
// value (yes, on, a repeat) is refused with 400 before anything is
// purged.
func TestS29AdminPurgeLocalIsNotMisread(t *testing.T) {
	a, _ := adminReviewCluster(t)
	for _, v := range []string{"true", "TRUE", "yes"} {
		resp, body := rawAsk(t, a.AdminAddr(), "POST /purge?url=http://shop.test/p&local="+v+" HTTP/1.1\r\nHost: x\r\n"+
			"Authorization: Bearer admin-token-0123456789\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
		t.Logf("local=%s: %d %s", v, resp.StatusCode, strings.TrimSpace(body))
		if resp.StatusCode == 200 && (!strings.Contains(body, `"peers_purged":0`) || !strings.Contains(body, `"peers_owed":0`)) {
			t.Errorf("POST /purge?…&local=%s answered %d %s: the purge went round the cluster (sent, or owed to a peer until it is back), not this node alone", v, resp.StatusCode, strings.TrimSpace(body))
		}
	}
}
