package proxy

import (
	"io"
	"net/http"
	"testing"
)

// TestS29NamedPurgeTagFieldEscapesTagPurge: namedFields refuses lists
// naming the fields the stored copy cannot lose (structuralFields), but
// not Surrogate-Key or Cache-Tag, which the cache reads to find the copy
// for a purge by tag (finishEntry's e.surrogates, purges.touchedSince).
// The copy is stored with its tags stripped, so a purge of its tag
// leaves it in the store and it is served after the purge.
//
// A review found (now mended: Surrogate-Key and Cache-Tag are structural): origin answers GET /p with {Cache-Control: max-age=600,
// no-cache="Surrogate-Key"; Surrogate-Key: product-7} (or the same with
// Cache-Tag); the operator purges tag product-7 (PurgeRequest{Tag:
// "product-7"}); the next GET /p is still "edge; hit" from the copy the
// purge was for, and the origin is not asked. Expected: a list naming a
// purge-tag field keeps the response out of the store (as a list naming
// Vary or Etag does), or the copy keeps its tags for purging, so that
// the tag purge removes it.
func TestS29NamedPurgeTagFieldEscapesTagPurge(t *testing.T) {
	for _, field := range []string{"Surrogate-Key", "Cache-Tag"} {
		t.Run(field, func(t *testing.T) {
			version := "v1"
			h, calls := handlerProxy(t, func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Cache-Control", `max-age=600, no-cache="`+field+`"`)
				w.Header().Set(field, "product-7")
				_, _ = io.WriteString(w, "price "+version)
			}, nil)
			serve(h, "GET", "/p")
			if w := serve(h, "GET", "/p"); w.Header().Get("Cache-Status") != "edge; hit" {
				// Not stored at all: the list is refused, which is fine.
				t.Logf("not stored (%q): the purge question does not arise", w.Header().Get("Cache-Status"))
				return
			}
			version = "v2"
			h.Purge(PurgeRequest{Tag: "product-7"})
			w := serve(h, "GET", "/p")
			if w.Body.String() != "price v2" {
				t.Errorf("after a purge of tag product-7: %q (Cache-Status %q, origin asked %d times), want the origin's new page",
					w.Body.String(), w.Header().Get("Cache-Status"), calls.Load())
			}
		})
	}
}
