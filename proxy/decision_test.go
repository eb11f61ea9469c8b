package proxy

import (
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// TestStorageForDecidesByRuleAndLimit table-tests fillFrom's decision: the
// response alone, no fetch, no store.
func TestStorageForDecidesByRuleAndLimit(t *testing.T) {
	cfg := DefaultConfig()
	cfg.SliceBytes = 1 << 20
	cfg.MaxObjectBytes = 4 << 20
	cfg.MaxBufferedBytes = 8 << 20
	store := NewStore(64<<20, 8)
	h := New(cfg, store, nil, NewMetrics(prometheus.NewRegistry(), store), nil)
	plain := miss{reqCC: ParseCacheControl(nil, "Cache-Control")}
	keyed := plain
	keyed.keyed = true
	noStoreReq := plain
	noStoreReq.reqCC.NoStore = true
	withAuth := plain
	withAuth.hasAuth = true

	for _, tc := range []struct {
		name   string
		status int
		cc     string
		extra  map[string]string
		length int64
		m      miss
		slices bool
		how    storage
		why    reason
	}{
		{"fresh and small", 200, "max-age=60", nil, 1000, plain, true, storeWhole, ""},
		{"no length yet", 200, "max-age=60", nil, -1, plain, true, storeWhole, ""},
		{"large enough to slice", 200, "max-age=60", nil, 2 << 20, plain, true, storeSliced, ""},
		{"sliceable but slices refused", 200, "max-age=60", nil, 2 << 20, plain, false, storeWhole, ""},
		{"keyed request never sliced", 200, "max-age=60", nil, 2 << 20, keyed, true, storeWhole, ""},
		{"over max_object_bytes", 200, "max-age=60", nil, 5 << 20, plain, false, storeNothing, whyTooLarge},
		{"over both limits: too-large first", 200, "max-age=60", nil, 9 << 20, plain, false, storeNothing, whyTooLarge},
		{"private", 200, "private, max-age=60", nil, 10, plain, true, storeNothing, whyPrivate},
		{"no-store", 200, "no-store", nil, 10, plain, true, storeNothing, whyNoStore},
		{"set-cookie", 200, "max-age=60", map[string]string{"Set-Cookie": "a=b"}, 10, plain, true, storeNothing, whySetCookie},
		{"vary star", 200, "max-age=60", map[string]string{"Vary": "*"}, 10, plain, true, storeNothing, whyVaryStar},
		{"request no-store", 200, "max-age=60", nil, 10, noStoreReq, true, storeNothing, whyRequestNoStore},
		{"credentials, not marked shareable", 200, "max-age=60", nil, 10, withAuth, true, storeNothing, whyAuthorization},
		{"credentials, public", 200, "public, max-age=60", nil, 10, withAuth, true, storeWhole, ""},
		{"partial content", 206, "max-age=60", nil, 10, plain, true, storeNothing, whyStatus},
		{"status past 599", 600, "max-age=60", nil, 10, plain, true, storeNothing, whyStatus},
		{"no freshness at all", 201, "", nil, 10, plain, true, storeNothing, whyNoFreshness},
		{"heuristic status", 404, "", nil, 10, plain, true, storeWhole, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hdr := http.Header{}
			if tc.cc != "" {
				hdr.Set("Cache-Control", tc.cc)
			}
			for k, v := range tc.extra {
				hdr.Set(k, v)
			}
			resp := &http.Response{StatusCode: tc.status, Header: hdr, ContentLength: tc.length}
			how, why := h.storageFor(resp, tc.m, tc.slices)
			if how != tc.how || why != tc.why {
				t.Fatalf("storageFor = (%d, %q), want (%d, %q)", how, why, tc.how, tc.why)
			}
		})
	}

	// The free buffer is read at the time of the decision.
	h.buffered.Store(7 << 20)
	resp := &http.Response{StatusCode: 200, Header: http.Header{"Cache-Control": {"max-age=60"}}, ContentLength: 2 << 20}
	if how, why := h.storageFor(resp, plain, false); how != storeNothing || why != whyBufferFull {
		t.Fatalf("with 1 MiB free, a 2 MiB body: (%d, %q), want buffer-full", how, why)
	}
}

// TestReasonTableSaysWhatEachReasonMeans pins what every reason does to
// the URL's memories and its stale copy: a reason about one request must
// never evict or pass by what others share.
func TestReasonTableSaysWhatEachReasonMeans(t *testing.T) {
	for _, tc := range []struct {
		why      reason
		memory   memory
		outdates bool
	}{
		{whyNoStore, rememberPass, true},
		{whyPrivate, rememberPass, true},
		{whySetCookie, rememberPass, true},
		{whyVaryStar, rememberPass, true},
		{whyNoFreshness, rememberPass, true},
		{whyMustUnderstand, rememberPass, true},
		{whyTooLarge, rememberLarge, true},
		{whyRequestNoStore, rememberNothing, false},
		{whyAuthorization, rememberNothing, false},
		{whyPersonalHeuristic, rememberNothing, false},
		{whyBufferFull, rememberNothing, false},
		{whyStatus, rememberNothing, false},
		{whyQRule, rememberNothing, false},
		{whyResumed, rememberNothing, false},
		{whyPurged, rememberNothing, false},
		{whyBodyError, rememberNothing, false},
		{reason("a-reason-nobody-listed"), rememberPass, true}, // unknown: the safe default
	} {
		if got := tc.why.remembered(); got != tc.memory {
			t.Errorf("%s: remembered %d, want %d", tc.why, got, tc.memory)
		}
		if got := tc.why.outdatesStale(); got != tc.outdates {
			t.Errorf("%s: outdatesStale %v, want %v", tc.why, got, tc.outdates)
		}
		withCookie := miss{hasCookie: true}
		if withCookie.aboutTheURL(tc.why, http.StatusOK) {
			t.Errorf("%s: a request with a Cookie spoke for the URL", tc.why)
		}
		if got := (miss{}).aboutTheURL(tc.why, http.StatusOK); got != tc.outdates {
			t.Errorf("%s: aboutTheURL %v, want %v", tc.why, got, tc.outdates)
		}
		// An error the request may have drawn speaks for nobody else;
		// one saying the resource is gone or restricted is the URL's.
		for _, status := range []int{400, 413, 429, 431, 500, 503} {
			if (miss{}).aboutTheURL(tc.why, status) {
				t.Errorf("%s: a %d spoke for the URL", tc.why, status)
			}
		}
		for _, status := range []int{301, 401, 403, 404, 410, 451} {
			if got := (miss{}).aboutTheURL(tc.why, status); got != tc.outdates {
				t.Errorf("%s: a %d: aboutTheURL %v, want %v", tc.why, status, got, tc.outdates)
			}
		}
	}
}

func TestCacheStatusBuilder(t *testing.T) {
	for _, tc := range []struct {
		s    cacheStatus
		want string
	}{
		{statusHit, "hit"},
		{statusHitStale, "hit; detail=stale"},
		{statusHitSWR, "hit; detail=stale-while-revalidate"},
		{forwarded("uri-miss").withStatus(200).markStored(), "fwd=uri-miss; fwd-status=200; stored"},
		{forwarded("stale").withStatus(304).withDetail("private"), "fwd=stale; fwd-status=304; detail=private"},
		{forwarded("vary-miss").markCollapsed(), "fwd=vary-miss; collapsed"},
		{forwarded("uri-miss").withStatus(206).markStored().withDetail("sliced"), "fwd=uri-miss; fwd-status=206; stored; detail=sliced"},
		{staleOnError(0), "fwd=stale; detail=origin-error"},
		{staleOnError(503), "fwd=stale; fwd-status=503; detail=origin-error"},
		{refused("request", "url_too_long"), "fwd=request; detail=url_too_long"},
		{forwarded("bypass").withStatus(201).withDetail(string(whyMethod)), "fwd=bypass; fwd-status=201; detail=method"},
	} {
		if got := tc.s.String(); got != tc.want {
			t.Errorf("%+v: %q, want %q", tc.s, got, tc.want)
		}
	}
	if !statusHit.plainHit() || statusHitStale.plainHit() || forwarded("miss").plainHit() {
		t.Fatal("plainHit is true for a fresh hit only")
	}
}

// TestDecideHitIsTheOneHitDecision table-tests the decision both fronts
// use: which stored entries answer which requests, with what status.
func TestDecideHitIsTheOneHitDecision(t *testing.T) {
	store := NewStore(64<<20, 8)
	h := New(DefaultConfig(), store, nil, NewMetrics(prometheus.NewRegistry(), store), nil)
	entry := func(cc string, age time.Duration) *Entry {
		hdr := http.Header{"Cache-Control": {cc}, "Date": {t0.Add(-age).Format(http.TimeFormat)}, "Content-Type": {"text/plain"}}
		return h.newEntry("k", &http.Response{StatusCode: 200, Header: hdr, ContentLength: 0}, t0.Add(-age), t0.Add(-age), nil)
	}
	none := ParseCacheControl(nil, "Cache-Control")
	reqCC := func(v string) CacheControl {
		return ParseCacheControl(http.Header{"Cache-Control": {v}}, "Cache-Control")
	}
	for _, tc := range []struct {
		name    string
		e       *Entry
		q       hitQuery
		answers bool
		refresh bool
		pass    reason
		status  string
		plain   bool
	}{
		{"fresh", entry("max-age=60", 10*time.Second), hitQuery{cc: none}, true, false, "", "hit", true},
		{"fresh, but a range", entry("max-age=60", 10*time.Second), hitQuery{cc: none, partial: true}, true, false, "", "hit", false},
		{"expired", entry("max-age=60", 2*time.Minute), hitQuery{cc: none}, false, false, "", "", false},
		{"stale-while-revalidate", entry("max-age=60, stale-while-revalidate=120", 2*time.Minute), hitQuery{cc: none}, true, true, "", "hit; detail=stale-while-revalidate", false},
		{"client max-stale", entry("max-age=60", 2*time.Minute), hitQuery{cc: reqCC("max-stale=120")}, true, false, "", "hit; detail=stale", false},
		{"client no-cache", entry("max-age=60", 10*time.Second), hitQuery{cc: reqCC("no-cache")}, false, false, "", "", false},
		{"client max-age below the age", entry("max-age=60", 10*time.Second), hitQuery{cc: reqCC("max-age=5")}, false, false, "", "", false},
		{"credentials, not shareable", entry("max-age=60", 10*time.Second), hitQuery{cc: none, hasAuth: true}, false, false, whyAuthorization, "", false},
		{"credentials, public", entry("public, max-age=60", 10*time.Second), hitQuery{cc: none, hasAuth: true}, true, false, "", "hit", true},
		{"no entry", nil, hitQuery{cc: none}, false, false, "", "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.q.now = t0
			d := h.decideHit(tc.e, tc.q)
			if d.answers() != tc.answers || d.refresh() != tc.refresh || d.pass != tc.pass {
				t.Fatalf("decideHit = %+v, want answers=%v refresh=%v pass=%q", d, tc.answers, tc.refresh, tc.pass)
			}
			if d.answers() && d.status().String() != tc.status {
				t.Fatalf("status %q, want %q", d.status().String(), tc.status)
			}
			if tc.e != nil && d.plainHit(tc.e, tc.q) != tc.plain {
				t.Fatalf("plainHit %v, want %v", !tc.plain, tc.plain)
			}
		})
	}
}
