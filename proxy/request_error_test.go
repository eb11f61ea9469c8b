package proxy

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"testing"
)

// An origin that gives every answer the same freshness (nginx's
// `add_header Cache-Control … always`) refuses one client's request for
// its form: a field it takes smaller than the edge, an Expect. That answer
// must not become the page for everyone (CPDoS): the next plain request
// gets the page. A 404 or 410 with freshness is the URL's and is stored.
func TestAnAnswerToTheRequestsFormIsNotStored(t *testing.T) {
	for _, tc := range []struct {
		status int
		stored bool
	}{
		{400, false}, {411, false}, {413, false}, {417, false}, {421, false}, {431, false},
		{404, true}, {410, true},
	} {
		t.Run(strconv.Itoa(tc.status), func(t *testing.T) {
			var fetches atomic.Int32
			origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				fetches.Add(1)
				w.Header().Set("Cache-Control", "max-age=600")
				if r.Header.Get("Referer") != "" {
					w.WriteHeader(tc.status)
					_, _ = w.Write([]byte("refused"))
					return
				}
				_, _ = w.Write([]byte("the page"))
			}))
			t.Cleanup(origin.Close)
			h := proxyFor(t, origin.URL, nil)
			ask := func(trouble bool) *httptest.ResponseRecorder {
				r := httptest.NewRequest("GET", "http://shop.test/p", nil)
				if trouble {
					r.Header.Set("Referer", "https://a.test/a-field-the-origin-refuses")
				}
				w := httptest.NewRecorder()
				h.ServeHTTP(w, r)
				h.Wait()
				return w
			}
			if w := ask(true); w.Code != tc.status {
				t.Fatalf("the refused request: %d, want the origin's %d", w.Code, tc.status)
			}
			w := ask(false)
			if tc.stored {
				if w.Code != tc.status || fetches.Load() != 1 {
					t.Fatalf("after a fresh %d: %d after %d fetches, want it from the store", tc.status, w.Code, fetches.Load())
				}
				return
			}
			if w.Code != http.StatusOK || w.Body.String() != "the page" {
				t.Fatalf("after one client's %d: the next plain request got %d %q (%s), want the page", tc.status, w.Code, w.Body.String(), w.Header().Get("Cache-Status"))
			}
			if w := ask(false); w.Code != http.StatusOK || fetches.Load() != 2 {
				t.Fatalf("the page again: %d after %d fetches, want a hit (the URL not passed by)", w.Code, fetches.Load())
			}
		})
	}
}
