package node

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
)

// TestS14PurgeOfAURLWithoutAPathMissesTheRootPage — a defect this review
// found in the same day's change, now mended (URLKey keys an empty path as
// "/"). What it was: a purge names the site's root page as an operator (or a
// visitor's address bar) writes it: "http://shop.test?id=7&utm_source=x",
// with no '/' before the query. url.Parse gives Path "", and URLKey
// (proxy/key.go) hands that "" to the site's key rule look-up
// (keyOn → site.Rules.ForKey("", …)). A rule for "/" (a prefix) does not
// match "", so the purge's key keeps the utm_ parameter the rule drops,
// while appendCacheKey writes the path as "/" in the key anyway. A request
// for the same page (GET /?id=7&utm_source=mail, which every browser
// sends for that address) is keyed under the rule, without utm_: the
// purge says purged 0 and the page stays.
func TestS14PurgeOfAURLWithoutAPathMissesTheRootPage(t *testing.T) {
	var calls atomic.Int64
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		w.Header().Set("Cache-Control", "max-age=600")
		_, _ = io.WriteString(w, "page "+r.URL.RawQuery)
	}))
	defer origin.Close()
	n := startNodeYAML(t, "listen: '"+freeAddr(t)+"'\nadmin: {listen: '"+freeAddr(t)+"', token: tok}\n"+
		"sites:\n  - name: shop\n    hosts: [shop.test]\n    origins: ['"+origin.URL+"']\n"+
		"    rules:\n      - {name: pages, match: {path: /}, key: {ignore_params: ['utm_*']}}\n")
	get := func(path string) {
		t.Helper()
		req, _ := http.NewRequest("GET", "http://"+n.PublicAddr()+path, nil)
		req.Host = "shop.test"
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	purge := func(u string) string {
		t.Helper()
		req, _ := http.NewRequest("POST", "http://"+n.AdminAddr()+"/purge?url="+url.QueryEscape(u), nil)
		req.Header.Set("Authorization", "Bearer tok")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return string(b)
	}
	// The control: with the '/', the purge finds the page.
	get("/?id=7&utm_source=mail")
	if body := purge("http://shop.test/?id=7&utm_source=news"); !strings.Contains(body, `"purged":1`) {
		t.Fatalf("control: purge of http://shop.test/?id=7&utm_source=news: %s", body)
	}
	get("/?id=7&utm_source=mail")
	before := calls.Load()
	body := purge("http://shop.test?id=7&utm_source=news")
	get("/?id=7")
	if !strings.Contains(body, `"purged":1`) || calls.Load() != before+1 {
		t.Errorf("purge of http://shop.test?id=7&utm_source=news (the root page, no '/' written): %s; the page was %s",
			body, map[bool]string{true: "fetched again", false: "still served from the cache"}[calls.Load() == before+1])
	}
}
