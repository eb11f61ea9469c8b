package cluster

import (
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// M is per site: a site behind a slow origin gets a larger M than one behind
// a fast origin, a site not yet measured uses the cluster-wide average, and
// Host spellings of one site share its estimate.
func TestMissPenaltyPerSite(t *testing.T) {
	var cc climbCosts
	for range 200 {
		cc.record("fast", 0.005)
		cc.record("slow", 0.200)
	}
	fast, ok := cc.forSite("fast")
	if !ok || fast < 0.0049 || fast > 0.0051 {
		t.Fatalf("fast site: %v s (measured %v), want 0.005", fast, ok)
	}
	slow, _ := cc.forSite("slow")
	if slow < 0.199 || slow > 0.201 {
		t.Fatalf("slow site: %v s, want 0.200", slow)
	}
	other, ok := cc.forSite("new")
	if ok || other <= fast || other >= slow {
		t.Fatalf("unmeasured site: %v s (measured %v), want the average between %v and %v", other, ok, fast, slow)
	}

	c := newTestCluster(t, "hybrid", map[string]string{"p": "127.0.0.1:1"})
	c.mu.Lock()
	c.climbs = cc
	mFast, _ := c.missPenalty("fast", 0.001)
	mSlow, climb := c.missPenalty("slow", 0.001)
	mNone, _ := (&Cluster{}).missPenalty("fast", 0.001)
	c.mu.Unlock()
	if mFast < 4.9 || mFast > 5.1 || mSlow < 199 || mSlow > 201 || climb != slow {
		t.Fatalf("M fast %v slow %v (climb %v s), want 5 and 200 cheapest-peer costs", mFast, mSlow, climb)
	}
	if mNone != defaultMissPenalty {
		t.Fatalf("M before any climb %v, want the default %v", mNone, defaultMissPenalty)
	}
}

// Sites for M are the configured ones, never a client's Host: any number
// of invented Hosts that no site names (the one-site shortcut answers them
// all) share the cluster-wide M and take no slot from a real site.
func TestMissPenaltyKeyedByConfiguredSite(t *testing.T) {
	c := newTestCluster(t, "hybrid", map[string]string{"p": "127.0.0.1:1"})
	if got := c.siteOf("shop.example"); got != "" {
		t.Fatalf("site without Config.SiteOf %q, want the shared \"\"", got)
	}
	c.cfg.SiteOf = (func(host string) string {
		if strings.HasPrefix(strings.ToLower(host), "shop.example") {
			return "shop"
		}
		return "" // the shortcut: no named site
	})
	c.mu.Lock()
	defer c.mu.Unlock()
	for i := range 10 * maxPenaltySites {
		c.climbs.record(c.siteOf("junk"+strconv.Itoa(i)+".example"), 0.001)
	}
	for range 200 {
		c.climbs.record(c.siteOf("SHOP.example:8443"), 0.200)
	}
	if v, own := c.climbs.forSite("shop"); !own || v < 0.199 {
		t.Fatalf("shop priced at %.4f s (own estimate %v) after 200 climbs of 200 ms, want its own 0.200", v, own)
	}
	if len(c.climbs.bySite) != 1 {
		t.Fatalf("%d sites tracked, want 1: invented Hosts took slots", len(c.climbs.bySite))
	}
}

// A client choosing Hosts cannot grow the table without bound: sites past
// the cap share the cluster-wide average, and the first sites keep theirs.
func TestMissPenaltySitesBounded(t *testing.T) {
	var cc climbCosts
	cc.record("first.example", 0.010)
	for i := range 10 * maxPenaltySites {
		cc.record("h"+strconv.Itoa(i)+".example", 1)
	}
	if len(cc.bySite) != maxPenaltySites {
		t.Fatalf("%d sites tracked, want at most %d", len(cc.bySite), maxPenaltySites)
	}
	if v, ok := cc.forSite("first.example"); !ok || v != 0.010 {
		t.Fatalf("first site %v (%v), want its own 0.010", v, ok)
	}
	if _, ok := cc.forSite("h" + strconv.Itoa(5*maxPenaltySites) + ".example"); ok {
		t.Fatal("a site past the cap got its own entry")
	}
}

// The route explorer names the site whose M it used and the climb latency
// behind it.
func TestExplainShowsSitePenalty(t *testing.T) {
	c := newTestCluster(t, "hybrid", map[string]string{"p": "127.0.0.1:1"})
	c.mu.Lock()
	c.climbs.record("slow.example", 0.150)
	c.climbs.record("fast.example", 0.010)
	c.mu.Unlock()
	c.cfg.SiteOf = func(host string) string { return strings.TrimSuffix(strings.ToLower(host), ":8080") }
	e, err := c.Explain("http://Slow.Example:8080/page", nil)
	if err != nil {
		t.Fatal(err)
	}
	if e.Site != "slow.example" || e.ClimbMs != 150 {
		t.Fatalf("explain site %q climb %v ms, want slow.example and 150", e.Site, e.ClimbMs)
	}
	e, _ = c.Explain("http://unseen.example/page", nil)
	if want := 150 + penaltyWeight*(10-150); math.Abs(e.ClimbMs-want) > 1e-9 {
		t.Fatalf("unmeasured site's climb %v ms, want the cluster-wide average %v", e.ClimbMs, want)
	}
}

// The climb's first hop is not a probe candidate unless configured: the
// climb asks it at once, so probing it first only adds a round trip. Every
// other trusted peer is, on the path or not and whatever its indication
// (the selection prices a negative one), and an untrusted first hop leaves
// the next one as the climb's first.
func TestProbeCandidatesSkipFirstHop(t *testing.T) {
	c := newTestCluster(t, "hybrid", map[string]string{"p1": "127.0.0.1:1", "p2": "127.0.0.1:2", "p3": "127.0.0.1:3"})
	c.mu.Lock()
	for _, p := range c.peers {
		p.trusted, p.member = true, true
	}
	c.mu.Unlock()
	ids := func(cs candidateSet) []string {
		var out []string
		for _, p := range cs.peers {
			out = append(out, p.ID)
		}
		slices.Sort(out)
		return out
	}
	path := []hop{{"p1", 4}, {"p2", 2}}
	if got := ids(c.candidates("k", "s", path, false)); !slices.Equal(got, []string{"p2", "p3"}) {
		t.Fatalf("candidates %v, want [p2 p3]: the first hop is asked by the climb", got)
	}
	c.mu.Lock()
	c.peers["p1"].trusted = false
	c.mu.Unlock()
	if got := ids(c.candidates("k", "s", path, false)); !slices.Equal(got, []string{"p3"}) {
		t.Fatalf("candidates %v with p1 untrusted, want [p3]: p2 is then the climb's first hop", got)
	}
	c.mu.Lock()
	c.peers["p1"].trusted, c.peers["p1"].member = true, true
	c.mu.Unlock()
	c.cfg.ProbeFirstHop = true
	if got := ids(c.candidates("k", "s", path, false)); !slices.Equal(got, []string{"p1", "p2", "p3"}) {
		t.Fatalf("candidates %v with probe_first_hop, want [p1 p2 p3]", got)
	}
}
