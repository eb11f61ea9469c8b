package cluster

import (
	"context"
	"strings"
	"testing"

	"github.com/edgecache/edge/proxy"
)

// TestAnInvalidPurgeDoesNotStopKeeping: Cluster.Purge starts its hold
// before the local purge validates the request. An invalid purge (no
// selector: POST /purge with an empty or misspelt query, a relative url=)
// has no key and a nil scope, which the hold reads as "every page"; the
// local purge then refuses it with 400, but the ended hold is remembered
// for keepEnded (10 min) and every peer page made before it is refused
// storage (made.Before(e.began)).
func TestAnInvalidPurgeDoesNotStopKeeping(t *testing.T) {
	for _, bad := range []proxy.PurgeRequest{{}, {URL: "/relative"}, {URL: "http://x/a", Tag: "t"}} {
		a, _, _, p := purgeHoldLab(t, 500_000_000) // A has asked for p once (count 1)
		if _, _, err := a.c.Purge(context.Background(), bad, a.ph.Purge); err == nil {
			t.Fatalf("purge %+v accepted", bad)
		}
		askWith(a, p) // the second request: A's q-rule keeps it
		w := askWith(a, p)
		t.Logf("purge %+v refused; third request for %s: Cache-Status %q; held copies %d", bad, p, w.Header().Get("Cache-Status"), a.c.PurgeHeldCopies())
		if !strings.Contains(w.Header().Get("Cache-Status"), "A; hit") {
			t.Errorf("a purge refused as invalid (%+v) kept A from keeping %s (held copies %d)", bad, p, a.c.PurgeHeldCopies())
		}
	}
}
