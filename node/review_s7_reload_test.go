package node

import (
	"bytes"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/edgecache/edge/config"
)

// TestS7ReloadToBypassStopsServingTheStore: a site whose rule becomes
// bypass after a reload is not answered from entries stored before it
// (neither by net/http nor by the hit path). Holds.
func TestS7ReloadToBypassStopsServingTheStore(t *testing.T) {
	a := newS7Origin(t, "A")
	v1 := "sites:\n" + s7Site("shop", []string{"shop.test"}, []string{a.URL}, "")
	v2 := "sites:\n" + s7Site("shop", []string{"shop.test"}, []string{a.URL}, "    rules:\n      - name: nocache\n        match: {path: '/p*'}\n        bypass: true\n")
	n := startS7Node(t, v1)
	for range 3 {
		n.get("shop.test", "/page")
		n.Proxy().Wait()
	}
	before := a.calls.Load()
	n.get("shop.test", "/page")
	if a.calls.Load() != before {
		t.Fatalf("v1 did not cache")
	}
	if code, body := n.reload(v2); code != 200 {
		t.Fatalf("reload: %d %s", code, body)
	}
	for i := range 3 {
		before = a.calls.Load()
		n.get("shop.test", "/page")
		if a.calls.Load() == before {
			t.Fatalf("request %d after the reload to bypass was answered from the store", i)
		}
	}
}

// TestS7ReloadKeepsOldEntriesWhenTheOriginMoves documents (passes) that a
// reload changing a site's origin keeps serving what the old origin
// answered until it expires: the key has no origin in it (as nginx's and
// Varnish's do not), and docs/rules.md says "A reload purges nothing".
// A miss after the reload goes to the new origin at once.
func TestS7ReloadKeepsOldEntriesWhenTheOriginMoves(t *testing.T) {
	a := newS7Origin(t, "A")
	b := newS7Origin(t, "B")
	n := startS7Node(t, "sites:\n"+s7Site("shop", []string{"shop.test"}, []string{a.URL}, ""))
	for range 2 {
		n.get("shop.test", "/old")
		n.Proxy().Wait()
	}
	if code, body := n.reload("sites:\n" + s7Site("shop", []string{"shop.test"}, []string{b.URL}, "")); code != 200 {
		t.Fatalf("reload: %d %s", code, body)
	}
	_, old := n.get("shop.test", "/old")
	_, fresh := n.get("shop.test", "/new")
	t.Logf("after moving the origin: cached page %q, new page %q", old, fresh)
	if !strings.Contains(fresh, "origin=B") {
		t.Errorf("a miss after the reload went to %q, want the new origin B", fresh)
	}
	if a.calls.Load() != 1 {
		t.Errorf("the old origin got %d requests, want 1 (the first fill)", a.calls.Load())
	}
}

// TestS7InvalidReloadKeepsServingAndNamesTheKey: broken files of several
// kinds are refused with the key named, and the running config serves.
func TestS7InvalidReloadKeepsServingAndNamesTheKey(t *testing.T) {
	a := newS7Origin(t, "A")
	good := "sites:\n" + s7Site("shop", []string{"shop.test"}, []string{a.URL}, "")
	n := startS7Node(t, good)
	cases := []struct{ body, key string }{
		{"sites:\n" + s7Site("shop", []string{"shop.test"}, []string{"ftp://x"}, ""), "sites[0].origins[0]"},
		{"sites:\n" + s7Site("shop", []string{"shop.test"}, []string{a.URL}, "") + s7Site("blog", []string{"shop.test"}, []string{a.URL}, ""), "sites[1].hosts[0]"},
		{"sites:\n" + s7Site("shop", []string{"shop.test"}, []string{a.URL}, "    rules:\n      - name: r\n        match: {path: '/x'}\n        ttl: banana\n"), "sites[0].rules"},
		{"sites:\n" + s7Site("shop", []string{"shop.test"}, []string{a.URL}, "    bogus: 1\n"), "sites[0].bogus"},
		{"sites: [\n", ""},
		{"listen: '127.0.0.1:1'\n" + good, "listen"},
	}
	for _, c := range cases {
		code, body := n.reload(c.body)
		if code != 400 || (c.key != "" && !strings.Contains(body, c.key)) {
			t.Errorf("reload of %q: %d %s, want 400 naming %s", c.body, code, body, c.key)
		}
		if code, body := n.get("shop.test", "/ok"); code != 200 || !strings.Contains(body, "origin=A") {
			t.Errorf("after the refused reload of %q: %d %q", c.body, code, body)
		}
	}
}

// syncBuf is a goroutine-safe log sink.
type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) { s.mu.Lock(); defer s.mu.Unlock(); return s.b.Write(p) }
func (s *syncBuf) String() string              { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

// TestS7RefusedReloadIsLogged: SIGHUP discards Reload's error ("errors
// are logged and counted", cmd/edge/serve.go), so the node's log is the
// only place an operator who sent SIGHUP (systemctl reload) learns why a
// reload was refused. A file that validates but whose sites cannot be
// built (origin.ca_file that does not exist: config.Load does not read
// it, `edge config check` passes it) is refused in newSiteTable, counted
// "invalid", and logged nowhere.
//
// Failed before 2026-12-06; fixed: the refusal is logged, and origin.ca_file is read at load.
func TestS7RefusedReloadIsLogged(t *testing.T) {
	a := newS7Origin(t, "A")
	var logs syncBuf
	s := &s7Node{file: t.TempDir() + "/edge.yaml", pub: freeAddr(t), adm: freeAddr(t), t: t}
	good := "sites:\n" + s7Site("shop", []string{"shop.test"}, []string{a.URL}, "")
	s.write(good)
	cfg, settings, err := s.load()
	if err != nil {
		t.Fatal(err)
	}
	n, err := New(cfg, slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	n.EnableReload(s.load, nil, settings)
	s.write("origin:\n  ca_file: '/nonexistent/s7-ca.pem'\n" + good)
	if _, err := config.LoadBytes([]byte("origin:\n  ca_file: '/nonexistent/s7-ca.pem'\n" + good)); err != nil {
		t.Logf("config.Load refuses it: %v", err)
	} else {
		t.Logf("config.Load (edge config check) accepts a missing origin.ca_file")
	}
	_, rerr := n.Reload()
	if rerr == nil {
		t.Fatalf("a reload with a missing origin.ca_file was accepted")
	}
	t.Logf("Reload error: %v", rerr)
	time.Sleep(50 * time.Millisecond)
	if !strings.Contains(logs.String(), "reload") || !strings.Contains(logs.String(), "ca_file") {
		t.Errorf("the refused reload (%v) is not in the node's log, which is all SIGHUP leaves: log=%q", rerr, logs.String())
	}
}

// TestS7SiteHostWithTrailingDotIsMatched: a site's host is lower-
// cased by config but not put in the canonical form the lookup uses
// (proxy.CanonicalHost drops a trailing dot), so `hosts: ["b.test."]`
// validates, never matches any request, and b.test's requests go to the
// default site's origin (here another customer's).
//
// Failed before 2026-12-06; fixed: site hosts are kept as requests are matched.
func TestS7SiteHostWithTrailingDotIsMatched(t *testing.T) {
	a := newS7Origin(t, "A")
	b := newS7Origin(t, "B")
	n := startS7Node(t, "sites:\n"+s7Site("a", []string{"a.test"}, []string{a.URL}, "    default: true\n")+
		s7Site("b", []string{"b.test."}, []string{b.URL}, ""))
	for _, h := range []string{"b.test", "b.test."} {
		if code, body := n.get(h, "/x"); !strings.Contains(body, "origin=B") {
			t.Errorf("site b has hosts [\"b.test.\"] (accepted by config validation), but a request with Host %q was answered %d %q: "+
				"by the default site's origin; config should store the canonical form (or refuse the host)", h, code, body)
		}
	}
}

// TestS7HostMovedToAnotherSiteOnOneNode: on a single node, a host moved
// from site old (O1) to site new (O2) by a reload gets O2's pages at once
// (the keys carry the site name). Holds; the cluster case does not
// (TestS7RollingReloadMovingAHostNeverServesTheOldSitesPages).
func TestS7HostMovedToAnotherSiteOnOneNode(t *testing.T) {
	o1 := newS7Origin(t, "O1")
	o2 := newS7Origin(t, "O2")
	n := startS7Node(t, "sites:\n"+s7Site("old", []string{"x.test"}, []string{o1.URL}, ""))
	for range 2 {
		n.get("x.test", "/p")
		n.Proxy().Wait()
	}
	if code, body := n.reload("sites:\n" + s7Site("new", []string{"x.test"}, []string{o2.URL}, "")); code != 200 {
		t.Fatalf("reload: %d %s", code, body)
	}
	if _, body := n.get("x.test", "/p"); !strings.Contains(body, "origin=O2") {
		t.Errorf("after moving x.test to site new: %q, want O2's page", body)
	}
}
