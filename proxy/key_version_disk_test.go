package proxy

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/edgecache/edge/disk"
)

// TestAnUpgradeNeverServesWhatTheOldKeyMappingStored: the release before
// CacheKeyVersion read every Vary field as a list, so a client sending
// "Origin: https://app.example," stored the origin's refusal of that
// origin under the key a real "Origin: https://app.example" now selects.
// The disk tier keeps such a record across the upgrade that fixes the
// reading; the upgraded node must not serve it to the real site's users.
func TestAnUpgradeNeverServesWhatTheOldKeyMappingStored(t *testing.T) {
	origin := func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "public, max-age=600")
		w.Header().Set("Vary", "Origin")
		if r.Header.Get("Origin") == "https://app.example" {
			w.Header().Set("Access-Control-Allow-Origin", "https://app.example")
			_, _ = io.WriteString(w, "allowed")
			return
		}
		_, _ = io.WriteString(w, "refused")
	}
	dir := t.TempDir()
	openTier := func(scheme string) *disk.Tier {
		tier, err := disk.Open(disk.Options{Dir: dir, MaxBytes: 64 << 20, KeyScheme: scheme})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = tier.Close(context.Background()) })
		return tier
	}
	h, _ := handlerProxy(t, origin, nil)
	u, _ := url.Parse("http://example.com/api")
	now := time.Now()
	// What the old release wrote for "Origin: https://app.example,": its
	// VaryKey joined the list's elements, dropping the empty last one, so
	// the record sits under the key the real origin selects (written here
	// in today's form of that key, which digests the value).
	legacy := openTier("")
	legacy.Write(&disk.Record{
		Key: h.URLKey(u), VaryNames: []string{"origin"}, VaryKey: VaryKey([]string{"origin"}, http.Header{"Origin": {"https://app.example"}}),
		Status: 200, Body: []byte("refused"), RequestTime: now, ResponseTime: now,
		Header: http.Header{"Cache-Control": {"public, max-age=600"}, "Vary": {"Origin"},
			"Date": {now.UTC().Format(http.TimeFormat)}, "Content-Type": {"text/plain"}},
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := legacy.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	_ = legacy.Close(ctx)

	// Without the version check the record is a hit for the real origin:
	// the collision this test guards against is real.
	unchecked := openTier("")
	h.store.AttachDisk(unchecked, TierOptions{PromoteHits: 1000, DiskOnlyBytes: 1})
	if w := serve(h, "GET", "/api", "Origin", "https://app.example"); w.Body.String() != "refused" {
		t.Fatalf("the legacy record was not selected without the check (%q): the test proves nothing", w.Body.String())
	}
	_ = unchecked.Close(ctx)

	upgraded, calls := handlerProxy(t, origin, nil)
	tier := openTier(CacheKeyVersion)
	upgraded.store.AttachDisk(tier, TierOptions{PromoteHits: 1000, DiskOnlyBytes: 1})
	w := serve(upgraded, "GET", "/api", "Origin", "https://app.example")
	if w.Body.String() != "allowed" || w.Header().Get("Access-Control-Allow-Origin") != "https://app.example" || calls.Load() != 1 {
		t.Fatalf("the upgraded node served %q (ACAO %q, origin asked %d times): the old mapping's record leaked",
			w.Body.String(), w.Header().Get("Access-Control-Allow-Origin"), calls.Load())
	}
	if rc := tier.Recovery(); rc.Rekeyed != 1 {
		t.Fatalf("recovery %+v: want the legacy record removed", rc)
	}
}
