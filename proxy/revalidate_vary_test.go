package proxy

import (
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// TestA304ThatChangesVaryAnswersItsRequestAlone: a stored page without Vary goes stale;
// the origin's 304 to Alice's revalidation says the page now varies by
// Cookie (and is validated for Alice's cookie only). Bob must not then be
// served the stored copy without the origin deciding for his cookie.
func TestA304ThatChangesVaryAnswersItsRequestAlone(t *testing.T) {
	var varies atomic.Bool
	h, calls := handlerProxy(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Etag", `"v1"`)
		if varies.Load() {
			w.Header().Set("Vary", "Cookie")
			w.Header().Set("Cache-Control", "max-age=600")
			if r.Header.Get("If-None-Match") == `"v1"` && strings.Contains(r.Header.Get("Cookie"), "alice") {
				w.WriteHeader(http.StatusNotModified)
				return
			}
			w.Header().Set("Etag", `"bob"`)
			_, _ = io.WriteString(w, "page for "+r.Header.Get("Cookie"))
			return
		}
		w.Header().Set("Cache-Control", "max-age=1")
		_, _ = io.WriteString(w, "shared page v1")
	}, nil)
	serve(h, "GET", "/p", "Cookie", "u=alice")
	time.Sleep(1100 * time.Millisecond)
	varies.Store(true)
	a := serve(h, "GET", "/p", "Cookie", "u=alice")
	before := calls.Load()
	b := serve(h, "GET", "/p", "Cookie", "u=bob")
	t.Logf("alice: %q %s Vary=%q; bob: %q %s Vary=%q; origin asked for bob: %v", a.Body.String(), a.Header().Get("Cache-Status"), a.Header().Get("Vary"),
		b.Body.String(), b.Header().Get("Cache-Status"), b.Header().Get("Vary"), calls.Load() > before)
	if calls.Load() == before {
		t.Errorf("bob was answered from a copy whose stored Vary: Cookie was validated for alice's cookie only (Cache-Status %s, body %q)",
			b.Header().Get("Cache-Status"), b.Body.String())
	}
}
