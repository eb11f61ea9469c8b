package proxy

import (
	"context"
	"io"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edgecache/edge/disk"
)

// cache.key_scheme needs a restart to change (config.LiveKeys), and a
// restart keeps the disk. Under key_scheme true an origin forcing https
// answers a plain request with a 301 to the https page, and the edge
// stores it, rightly, under the http key. After the operator turns
// key_scheme off and restarts, every request keys as http: the https
// users of the page are answered from disk with that 301 to the page
// itself, a redirect loop for everyone. The store refuses exactly that
// answer under key_scheme false (redirectsToOtherScheme, fetch time
// only); the disk tier, whose KeyScheme is CacheKeyVersion alone, brings
// it back across the configuration change. Mended: the node opens its
// tier under DiskKeyScheme, which names key_scheme (s55Node opens it so).
func TestS55DiskKeySchemeTurnedOffServesHTTPSUsersTheRedirectToThemselves(t *testing.T) {
	origin := func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "public, max-age=3600")
		if r.Header.Get("X-Forwarded-Proto") != "https" {
			w.Header().Set("Location", "https://example.com/page")
			w.WriteHeader(http.StatusMovedPermanently)
			return
		}
		_, _ = io.WriteString(w, "the page")
	}
	dir := t.TempDir()
	h, _, tier := s55Node(t, dir, origin, func(c *Config) { c.KeyScheme = true })
	if w := s29Serve(h, "/page", false); w.Code != http.StatusMovedPermanently {
		t.Fatalf("plain request: %d, want the origin's 301", w.Code)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := tier.Close(ctx); err != nil { // a clean restart
		t.Fatal(err)
	}

	h2, calls2, _ := s55Node(t, dir, origin, func(c *Config) { c.KeyScheme = false })
	w := s29Serve(h2, "/page", true)
	if w.Code != http.StatusOK || w.Body.String() != "the page" {
		t.Errorf("https request after key_scheme was turned off: %d Location %q (origin asked %d times), want 200 \"the page\": "+
			"the stored plain-http redirect to https sends https users to the page itself",
			w.Code, w.Header().Get("Location"), calls2.Load())
	}
}

// A URL purge names the page under the key of the configuration in force.
// Under key_scheme false the https entries stored while it was true are
// no key any request (or purge) reaches, and DropUnreachable, which drops
// such keys for a renamed site at every start and reload, leaves them: a
// purge of the page then misses them, and turning key_scheme back on
// serves the purged page from disk.
func TestS55DiskKeySchemeFlipBringsBackAPagePurgedInBetween(t *testing.T) {
	version := "v1"
	origin := func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "public, max-age=3600")
		_, _ = io.WriteString(w, "page "+version)
	}
	closeTier := func(tier interface{ Close(context.Context) error }) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := tier.Close(ctx); err != nil {
			t.Fatal(err)
		}
	}
	dir := t.TempDir()
	on := func(c *Config) { c.KeyScheme = true }
	off := func(c *Config) { c.KeyScheme = false }

	h1, _, tier1 := s55Node(t, dir, origin, on)
	if w := s29Serve(h1, "/p", true); w.Body.String() != "page v1" {
		t.Fatalf("fill: %q", w.Body.String())
	}
	closeTier(tier1)

	version = "v2"
	h2, _, tier2 := s55Node(t, dir, origin, off)
	_ = h2.DropUnreachable() // as every start does
	if _, err := h2.Purge(PurgeRequest{URL: "https://example.com/p"}); err != nil {
		t.Fatal(err)
	}
	closeTier(tier2)

	h3, calls3, _ := s55Node(t, dir, origin, on)
	if w := s29Serve(h3, "/p", true); w.Body.String() != "page v2" {
		t.Errorf("after purging https://example.com/p (under key_scheme false) and turning key_scheme back on: served %q (origin asked %d times), want the origin's \"page v2\"",
			w.Body.String(), calls3.Load())
	}
}

// s55Node is s29Node with the tier opened as a node opens it: under the
// key scheme of the handler's settings (DiskKeyScheme, node/disk.go).
func s55Node(t *testing.T, dir string, fn http.HandlerFunc, mod func(*Config)) (*Handler, *atomic.Int64, *disk.Tier) {
	t.Helper()
	h, calls := handlerProxy(t, fn, mod)
	tier, err := disk.Open(disk.Options{Dir: dir, MaxBytes: 64 << 20, KeyScheme: DiskKeyScheme(h.cfg.KeyScheme, h.cfg.SortQuery)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tier.Close(context.Background()) })
	h.store.AttachDisk(tier, TierOptions{PromoteHits: 1, DiskOnlyBytes: 1})
	return h, calls, tier
}

func TestDiskKeySchemeNamesTheRestartOnlyKeySettings(t *testing.T) {
	seen := map[string]bool{}
	for _, ks := range []bool{false, true} {
		for _, sq := range []bool{false, true} {
			seen[DiskKeyScheme(ks, sq)] = true
		}
	}
	if len(seen) != 4 || DiskKeyScheme(false, false) != CacheKeyVersion {
		t.Errorf("schemes %v: want four, the defaults' CacheKeyVersion alone", seen)
	}
}
