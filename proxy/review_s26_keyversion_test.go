package proxy

import (
	"net/http"
	"testing"
)

// A review found (now mended): 316e73b and a9c10bd changed how requests map to cache keys
// (a cookie whose name only folds to a keyed one, LANG=de for
// key.cookies [lang], was keyed as no cookie under CacheKeyVersion "2" as
// 75237df released it; 316e73b keyed it "LANG=de", the key of
// lang=LANG=de; a9c10bd keys it "\x01LANG=de") and left CacheKeyVersion
// at "2": the pin (TestCacheKeyVersionPinsTheKeys) did not move because
// its inputs hold no folded cookie name. The disk tier keeps every record
// of version "2" across the upgrade, so what the old mappings stored
// under a key the new one gives to other requests is still served: the
// default (no-cookie) variant a LANG=de visitor filled before 316e73b
// (the German page, the poisoning 316e73b mended) is served to every
// visitor without a cookie after the upgrade, and the entry a LANG=de
// visitor filled under e83f0bd to every lang=LANG=de request after
// a9c10bd. proxy/key.go documents exactly this case as the reason for a
// version ("a poisoned variant stored before the fix would have been
// served after it").
// Fix: bump CacheKeyVersion to "3", add a folded cookie ("LANG=de;
// auth.token=1") to keyVersionInputs' Cookie and re-pin the fingerprint.
func TestS26FoldedCookieKeyingChangedUnderTheSameKeyVersion(t *testing.T) {
	rule := ruleSite(t, `[{name: pages, key: {cookies: [lang]}}]`).Rules.ForKey("/p", "")
	none := rule.KeyExtra(http.Header{})
	folded := rule.KeyExtra(http.Header{"Cookie": {"LANG=de"}})
	exactOdd := rule.KeyExtra(http.Header{"Cookie": {"lang=LANG=de"}})
	// Under version "2" as released (75237df: cookieValues matched names
	// exactly), LANG=de keyed as no cookie.
	if folded != none && CacheKeyVersion == "2" {
		t.Errorf("Cookie LANG=de keys %q, not %q (no cookie) as under CacheKeyVersion \"2\" when it was released, and lang=LANG=de keys %q: the mapping changed twice (316e73b, a9c10bd) and the version is still %q, so the disk tier serves what the old mapping stored under these keys",
			folded, none, exactOdd, CacheKeyVersion)
	}
}
