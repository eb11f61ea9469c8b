package proxy

import (
	"context"
	"io"
	"net/http"
	"testing"

	"github.com/edgecache/edge/disk"
)

// s29NamedDiskOrigin answers a page anyone may have: one Cache-Control
// line (cc) and the requester's account in X-Account.
func s29NamedDiskOrigin(cc string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", cc)
		w.Header().Set("ETag", `"v1"`)
		if u := r.Header.Get("X-User"); u != "" {
			w.Header().Set("X-Account", u)
		}
		_, _ = io.WriteString(w, "page for anyone")
	}
}

// TestS29NamedDiskRecordOfAnEarlierVersionIsServedFreshWithItsField:
// before 7e7410f (from b298f53 on: CacheKeyVersion "3" already, as now,
// so node/disk.go's KeyScheme check reads its records), a response with Cache-Control: no-cache="X-Account" was
// stored WITH its X-Account (sharedHeader did not strip it) and was safe
// only because Entry.mustRevalidate counted NoCacheFields: every use was
// revalidated. 982f8ef dropped NoCacheFields from mustRevalidate, and
// revive (proxy/tiers.go) rebuilds the entry from the record's header as
// it is, without namedFields: such a record, still on disk after the
// upgrade, is now served fresh with alice's X-Account to everyone.
//
// A review found (now mended: revive strips named fields; key version 4 drops older records): a disk record holding {Cache-Control: max-age=600,
// no-cache="X-Account"; X-Account: alice} (what the version before
// 7e7410f wrote for alice's GET /p) is revived after a restart; bob's
// GET /p is answered from it as a fresh hit with X-Account: alice.
// Expected: a revived entry is held to the stored-copy rule as a fill's
// is (the named fields stripped on revive, or the record dropped / the
// key version bumped), so bob never gets alice's X-Account.
func TestS29NamedDiskRecordOfAnEarlierVersionIsServedFreshWithItsField(t *testing.T) {
	dir := t.TempDir()
	// Run 1 (this version, a plain page): learn the key and vary key the
	// handler writes records under.
	h1, _ := handlerProxy(t, s29NamedDiskOrigin("max-age=600"), nil)
	tier1, err := disk.Open(disk.Options{Dir: dir, MaxBytes: 64 << 20})
	if err != nil {
		t.Fatal(err)
	}
	h1.store.AttachDisk(tier1, TierOptions{PromoteHits: 1000, DiskOnlyBytes: 1})
	serve(h1, "GET", "/p", "X-User", "carol")
	ctx := context.Background()
	if err := tier1.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	keys := tier1.Keys(func(string) bool { return true })
	if len(keys) != 1 {
		t.Fatalf("disk keys %q, want the one page", keys)
	}
	rec, _ := tier1.Lookup(keys[0], func([]string) string { return "" })
	if rec == nil {
		t.Fatal("the page's record is not on disk")
	}
	// What the version before 7e7410f stored for alice's fetch of the
	// same page under no-cache="X-Account": her field kept, to be
	// revalidated on every use.
	old := *rec
	old.Header = rec.Header.Clone()
	old.Header.Set("Cache-Control", `max-age=600, no-cache="X-Account"`)
	old.Header.Set("X-Account", "alice")
	tier1.Write(&old)
	if err := tier1.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if err := tier1.Close(ctx); err != nil {
		t.Fatal(err)
	}

	// Run 2: this version, restarted on the same disk.
	h2, calls := handlerProxy(t, s29NamedDiskOrigin(`max-age=600, no-cache="X-Account"`), nil)
	tier2, err := disk.Open(disk.Options{Dir: dir, MaxBytes: 64 << 20})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tier2.Close(context.Background()) })
	h2.store.AttachDisk(tier2, TierOptions{PromoteHits: 1000, DiskOnlyBytes: 1})
	for _, who := range []string{"bob", ""} {
		w := serve(h2, "GET", "/p", "X-User", who)
		if w.Body.String() != "page for anyone" {
			t.Fatalf("%q: %d %q", who, w.Code, w.Body.String())
		}
		if got := w.Header().Get("X-Account"); got == "alice" {
			t.Errorf("%q got alice's X-Account from a revived disk record (Cache-Status %q, origin asked %d times): "+
				"a field its own Cache-Control names one user's, served fresh", who, w.Header().Get("Cache-Status"), calls.Load())
		}
	}
}
