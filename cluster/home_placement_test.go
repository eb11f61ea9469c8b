package cluster

import (
	"io"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/edgecache/edge/proxy"
	"github.com/edgecache/edge/routing"
)

// With routing.home=region a hot page's regional home is the first member
// of the page's ranking in the region; it plays that ranking position's
// tree rank, so when the chosen leaf lies under it the tree path already
// holds it at that rank and the closing add(home, 2) is dropped as a
// duplicate: the home gets rank r > 2, applies the q-rule (does not keep
// the first fetch) and counts (page, r) apart from (page, 2). In global
// mode (distinct placement) the home is always the path's last hop at rank 2.
func TestRegionalHomeAlwaysRank2(t *testing.T) {
	c, members, _ := newRegionalCluster(t, 12)
	if err := c.router.SetView(members); err != nil {
		t.Fatal(err)
	}
	bad := 0
	for p := range 200 {
		kh := routing.KeyHash("http://h/p/" + strconv.Itoa(p))
		for leaf := range 12 {
			path, home, _ := c.planFor(kh, true, func(n int) int { return leaf % n })
			if home == "n0" || len(path) == 0 {
				continue
			}
			last := path[len(path)-1]
			if last.id != home || last.rank != 2 {
				bad++
				if bad == 1 {
					t.Logf("page %d leaf %d: home %s, path %v", p, leaf, home, path)
				}
			}
		}
	}
	if bad > 0 {
		t.Errorf("%d hot plans reach the regional home at a rank other than 2 (or not last)", bad)
	}
}

// Ring mode with the default distinct placement: the ingress's "home"
// (ranking[0], which decides Keep = isHome) is not the ring owner the path
// climbs to, so the ingress keeps unconditionally pages it does not own
// (pre-existing; routing.home=region changed the branch next to it).
func TestRingHomeIsThePathsOwner(t *testing.T) {
	peers := map[string]string{}
	members := []routing.Member{{ID: "n0"}}
	for i := 1; i < 8; i++ {
		id := "n" + strconv.Itoa(i)
		peers[id] = "127.0.0.1:1"
		members = append(members, routing.Member{ID: id})
	}
	c := newTestClusterPlaced(t, "ring", peers, routing.PlacementDistinct)
	if err := c.router.SetView(members); err != nil {
		t.Fatal(err)
	}
	bad := 0
	for p := range 400 {
		kh := routing.KeyHash("http://h/p/" + strconv.Itoa(p))
		path, home, _ := c.planFor(kh, false, func(n int) int { return n - 1 })
		if home == "n0" && len(path) > 0 {
			bad++
		}
	}
	if bad > 0 {
		t.Errorf("%d of 400 pages: the ingress thinks it is the home (keeps unconditionally) while the path climbs to another owner", bad)
	}
}

// Sanity: after probe hits, probe misses, probes that time out on headers
// and climbs, every request has left its peer's waiting map.
func TestWaitingMapDrains(t *testing.T) {
	origin := &countingOrigin{}
	c := newPlanCluster(t, "n0", routing.ModeRing, SelectionFNA, origin)
	p1, p2 := startFakePeer(t, "p1"), startFakePeer(t, "p2")
	join(c, p1, p2)
	path := keyHomedAt(t, c, "p2")
	key := proxy.CacheKey("http", "site.example", path, "")
	adv := newPlanCluster(t, "p1", routing.ModeRing, SelectionOff, origin)
	adv.filter.Insert([]byte(key))
	adv.store.(*proxy.Store).Put(testEntry(key))
	adv.advertise()
	if err := c.peers["p1"].replica.Apply(adv.advFull); err != nil {
		t.Fatal(err)
	}
	waiting := func() int {
		c.mu.Lock()
		defer c.mu.Unlock()
		return len(c.peers["p1"].waiting) + len(c.peers["p2"].waiting)
	}
	for name, answer := range map[string]func(http.ResponseWriter, *http.Request, *route){
		"hit":  func(w http.ResponseWriter, _ *http.Request, _ *route) { _, _ = io.WriteString(w, "hit") },
		"miss": func(w http.ResponseWriter, _ *http.Request, _ *route) { http.Error(w, "no", http.StatusGatewayTimeout) },
		"late": func(w http.ResponseWriter, _ *http.Request, _ *route) {
			time.Sleep(c.cfg.PeerTimeout + 50*time.Millisecond)
			_, _ = io.WriteString(w, "late")
		},
	} {
		p1.setAnswer(answer)
		if _, _, err := fetchBody(t, c, path); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		time.Sleep(100 * time.Millisecond)
		if n := waiting(); n != 0 {
			t.Errorf("%s: %d requests still registered as waiting", name, n)
		}
	}
}
