package proxy

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"
	"time"

	"github.com/edgecache/edge/disk"
)

// s34DiskWith opens a disk tier of today's key scheme in a temp dir,
// writes recs to it (as the release before 89736e3 stored them) and
// attaches a reopened tier to a fresh handler in front of origin.
func s34DiskWith(t *testing.T, origin http.HandlerFunc, recs func(h *Handler, now time.Time) []*disk.Record) (*Handler, func() int64) {
	t.Helper()
	dir := t.TempDir()
	open := func() *disk.Tier {
		tier, err := disk.Open(disk.Options{Dir: dir, MaxBytes: 64 << 20, KeyScheme: CacheKeyVersion})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = tier.Close(context.Background()) })
		return tier
	}
	h, calls := handlerProxy(t, origin, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	old := open()
	for _, r := range recs(h, time.Now()) {
		old.Write(r)
	}
	if err := old.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	_ = old.Close(ctx)
	h.store.AttachDisk(open(), TierOptions{PromoteHits: 1000, DiskOnlyBytes: 1})
	return h, calls.Load
}

// A review found (now mended): the disk tier revives what the release before 89736e3 stored
// and 89736e3 no longer stores: a 400 (the CPDoS'd page) and an origin's
// Alt-Svc. revive (proxy/tiers.go) re-derives freshness under the current
// policy but never asks storable, and holds the header to the named-field
// rule only, not to sharedHeader's new Alt-Svc removal; the cache key
// version did not change, so the records are read as current.
//
// Steps: records of today's key scheme on disk: /p a 400 with max-age=86400
// (one client's oversized header poisoned the page the day before the
// upgrade) and /q a 200 with "Alt-Svc: clear"; the upgraded node starts on
// that disk; a plain client asks /p, and /q (the TLS front's own Alt-Svc
// already set on the response writer, as node/tls.go wrap does).
// Expected: /p fetched from the origin (200: the 400 is not a stored copy
// this release serves); /q with the front's Alt-Svc, not the origin's.
// Got: the poisoned 400 served as a hit for the rest of its day; /q
// answers "Alt-Svc: clear", replacing the edge's h3 advertisement (the
// defect the fix was for, back for as long as the record lives).
func TestS34DiskRecordsOfWhatTheFixNoLongerStoresAreNotRevived(t *testing.T) {
	origin := func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=600")
		_, _ = w.Write([]byte("the page"))
	}
	h, calls := s34DiskWith(t, origin, func(h *Handler, now time.Time) []*disk.Record {
		rec := func(path string, status int, hdr http.Header, body string) *disk.Record {
			u, _ := url.Parse("http://example.com" + path)
			hdr.Set("Date", now.UTC().Format(http.TimeFormat))
			hdr.Set("Content-Type", "text/plain")
			return &disk.Record{Key: h.URLKey(u), Status: status, Body: []byte(body), RequestTime: now, ResponseTime: now, Header: hdr}
		}
		return []*disk.Record{
			rec("/p", 400, http.Header{"Cache-Control": {"max-age=86400"}}, "bad request"),
			rec("/q", 200, http.Header{"Cache-Control": {"max-age=86400"}, "Alt-Svc": {"clear"}}, "q"),
		}
	})
	if w := serve(h, "GET", "/p"); w.Code != http.StatusOK {
		t.Errorf("/p: %d %q (%s) after %d origin calls: the disk's 400 from before the fix was revived and served",
			w.Code, w.Body.String(), w.Header().Get("Cache-Status"), calls())
	}
	r := httptest.NewRequest("GET", "http://example.com/q", nil)
	w := httptest.NewRecorder()
	w.Header()["Alt-Svc"] = []string{`h3=":443"; ma=86400`} // the TLS front's
	h.ServeHTTP(w, r)
	h.Wait()
	if got := w.Header().Values("Alt-Svc"); len(got) != 1 || got[0] != `h3=":443"; ma=86400` {
		t.Errorf("/q: Alt-Svc %q (%s), want the front's own: the disk record's origin Alt-Svc replaced it", got, w.Header().Get("Cache-Status"))
	}
}
