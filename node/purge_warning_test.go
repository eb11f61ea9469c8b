package node

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
)

// TestAPurgeOfAHostNoSiteServesSaysSo: a purge naming a host no site
// serves (a typo, a site this node does not have) finds nothing, as its
// count says; its answer also says why, where before it read as a page
// that was not cached. A host a site serves, a tag and a path prefix get
// no warning, nor does any host on the one-site shortcut (origin.url),
// which serves every host.
func TestAPurgeOfAHostNoSiteServesSaysSo(t *testing.T) {
	o := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=600")
		_, _ = io.WriteString(w, "page")
	}))
	defer o.Close()
	purge := func(n *s7Node, query string) map[string]any {
		t.Helper()
		code, body := n.admin("POST", "/purge?"+query)
		var answer map[string]any
		if err := json.Unmarshal([]byte(body), &answer); err != nil || code != http.StatusOK {
			t.Fatalf("purge %s: %d %q", query, code, body)
		}
		return answer
	}
	sites := startS7Node(t, "sites:\n"+s7Site("shop", []string{"shop.test"}, []string{o.URL}, ""))
	sites.get("shop.test", "/p")
	sites.Proxy().Wait()
	for query, warned := range map[string]bool{
		"url=http://shpo.test/p":   true,
		"prefix=http://shpo.test/": true,
		"url=http://SHOP.test./p":  false,
		"url=http://shop.test/p":   false,
		"prefix=/p":                false,
		"tag=t":                    false,
	} {
		a := purge(sites, query)
		if _, ok := a["warning"]; ok != warned {
			t.Errorf("purge %s: %v; a warning: %v, want %v", query, a, ok, warned)
		}
	}
	shortcut := startS7Node(t, "origin: {url: '"+o.URL+"'}\n")
	if a := purge(shortcut, "url=http://any.test/p"); a["warning"] != nil {
		t.Errorf("the one-site shortcut serves every host, but its purge says %v", a["warning"])
	}
}
