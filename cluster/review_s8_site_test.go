package cluster

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/edgecache/edge/proxy"
	"github.com/edgecache/edge/routing"
)

// TestS8EdgeSiteNamesTheSiteTheFetchKeysUnder: a fill resolved on the old
// table (fr.Site "old", its key "old http://…") whose peer request is made
// after a reload moved the host to "new" carries Edge-Site "new", taken
// from the sender's table of now, not the site its answer will be stored
// under. A peer already on the new table accepts it and answers with site
// new's page, which the asker stores under site old's key: the cross-site
// mix Edge-Site was added to prevent.
//
// Failed before 2026-12-06; fixed: Edge-Site comes from the key (proxy.KeySite).
func TestS8EdgeSiteNamesTheSiteTheFetchKeysUnder(t *testing.T) {
	c := newPlanCluster(t, "n0", routing.ModeRing, SelectionOff, &countingOrigin{})
	p1 := startFakePeer(t, "p1")
	var mu sync.Mutex
	var seen []string
	p1.setAnswer(func(w http.ResponseWriter, r *http.Request, _ *route) {
		mu.Lock()
		seen = append(seen, r.Header.Get(hdrSite))
		mu.Unlock()
		_, _ = io.WriteString(w, "from p1")
	})
	join(c, p1)
	c.cfg.SiteOf = func(string) string { return "new" } // the table after the reload
	var path, key string
	for i := range 10000 {
		p := "/k/" + string(rune('a'+i%26)) + strings.Repeat("x", i/26)
		k := "old " + proxy.CacheKey("http", "site.example", p, "")
		hops, _, _ := c.planFor(routing.KeyHash(k), false, func(n int) int { return n - 1 })
		if len(hops) > 0 && hops[0].id == "p1" {
			path, key = p, k
			break
		}
	}
	if path == "" {
		t.Fatal("no key homed at p1")
	}
	req := httptest.NewRequest("GET", "http://site.example"+path, nil)
	req.RequestURI = ""
	res, err := c.Fetch(context.Background(), proxy.FetchRequest{Key: key, Req: req, Site: proxy.NewSite("old", false, nil)})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Resp.Body)
	res.Resp.Body.Close()
	mu.Lock()
	defer mu.Unlock()
	if len(seen) == 0 {
		t.Fatalf("the peer was never asked (got %q)", b)
	}
	for _, s := range seen {
		if s != "old" {
			t.Errorf("a fill keyed under site \"old\" (%q) asked its peer with Edge-Site %q; the peer checks the site the answer will be stored under, want \"old\" (got %q from %s, keep=%v)", key, s, b, res.From, res.Keep)
		}
	}
}
