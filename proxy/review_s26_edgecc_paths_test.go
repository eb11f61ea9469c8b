package proxy

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// s26ECCProxy: an origin whose every answer carries Edge-Cache-Control
// (max-age=600) beside Cache-Control; /big is sliced, /gone fails after
// the first answer (stale-if-error), /page is compressible.
func s26ECCProxy(t *testing.T) (*Handler, *atomic.Bool) {
	t.Helper()
	big := strings.Repeat("0123456789abcdef", 1<<16) // 1 MiB
	html := page(8 << 10)
	var failing atomic.Bool
	h, _ := handlerProxy(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Edge-Cache-Control", "max-age=600, stale-if-error=600")
		w.Header().Set("Cache-Control", "max-age=1")
		w.Header().Set("ETag", `"e1"`)
		switch {
		case strings.HasPrefix(r.URL.Path, "/gone") && failing.Load():
			w.WriteHeader(http.StatusServiceUnavailable)
		case strings.HasPrefix(r.URL.Path, "/big"):
			w.Header().Set("Content-Type", "application/octet-stream")
			http.ServeContent(w, r, "", time.Time{}, strings.NewReader(big))
		default:
			w.Header().Set("Content-Type", "text/html")
			http.ServeContent(w, r, "", time.Time{}, strings.NewReader(html))
		}
	}, func(c *Config) {
		withCompression(c)
		c.SliceBytes = 256 << 10
		c.MaxObjectBytes = 512 << 10
	})
	return h, &failing
}

// HOLDS: every answer a node gives from the paths 463e445/a9c10bd name
// carries Edge-Cache-Control to a peer (Inbound.Relayed) and never to a
// client: a fill, a hit, a compressed form (encodeLive and a stored
// form), a 304, a range, a sliced object and its range, stale-if-error.
func TestS26EdgeCacheControlOnEveryRelayedPath(t *testing.T) {
	h, failing := s26ECCProxy(t)
	ask := func(relayed bool, path string, hdr ...string) *httptest.ResponseRecorder {
		r := httptest.NewRequest("GET", "http://example.com"+path, nil)
		for i := 0; i+1 < len(hdr); i += 2 {
			r.Header.Set(hdr[i], hdr[i+1])
		}
		w := httptest.NewRecorder()
		h.ServeInbound(w, r, Inbound{Relayed: relayed})
		h.Wait()
		return w
	}
	cases := []struct {
		name string
		path string
		hdr  []string
	}{
		{"fill", "/page", nil},
		{"hit", "/page", nil},
		{"gzip", "/page", []string{"Accept-Encoding", "gzip"}},
		{"br", "/page", []string{"Accept-Encoding", "br"}},
		{"304", "/page", []string{"If-None-Match", `"e1"`}},
		{"range", "/page", []string{"Range", "bytes=0-9"}},
		{"sliced", "/big", nil},
		{"sliced range", "/big", []string{"Range", "bytes=300000-300009"}},
		{"sliced 304", "/big", []string{"If-None-Match", `"e1"`}},
	}
	for _, relayed := range []bool{true, false} {
		for _, c := range cases {
			w := ask(relayed, c.path, c.hdr...)
			got := w.Header().Get("Edge-Cache-Control") != ""
			if got != relayed {
				t.Errorf("relayed %v, %s: %d Edge-Cache-Control %q (Cache-Status %q)", relayed, c.name, w.Code, w.Header().Get("Edge-Cache-Control"), w.Header().Get("Cache-Status"))
			}
		}
	}
	ask(false, "/gone")
	failing.Store(true)
	// Past Edge-Cache-Control's max-age: stale-if-error.
	h.cfg.Now = func() time.Time { return time.Now().Add(700 * time.Second) }
	for _, relayed := range []bool{true, false} {
		w := ask(relayed, "/gone", "Cache-Control", "max-age=0")
		if got := w.Header().Get("Edge-Cache-Control") != ""; got != relayed || !bytes.Contains(w.Body.Bytes(), []byte("<li>")) {
			t.Errorf("stale-if-error, relayed %v: %d Edge-Cache-Control %q (Cache-Status %q)", relayed, w.Code, w.Header().Get("Edge-Cache-Control"), w.Header().Get("Cache-Status"))
		}
	}
}
