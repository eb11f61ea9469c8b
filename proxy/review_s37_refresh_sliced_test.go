package proxy

// Hostile review s37: a background refresh of a sliced object (outSliced)
// gives its slot back, whether the origin answers a new version, the same
// one (304) or fails, and whether the stale request was whole or a range.

import (
	"bytes"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestS37SlicedRefreshGivesItsSlotBack(t *testing.T) {
	for _, mode := range []string{"new", "same", "500"} {
		for _, rng := range []string{"", "bytes=100-200", "bytes=200000-"} {
			clk := &clock{now: t0}
			var stale atomic.Bool
			h, _ := handlerProxy(t, func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Date", clk.Now().Format(http.TimeFormat))
				w.Header().Set("Cache-Control", "max-age=1, stale-while-revalidate=600")
				w.Header().Set("Content-Type", "application/octet-stream")
				etag, fill := `"v1"`, "a"
				if stale.Load() {
					switch mode {
					case "new":
						etag, fill = `"v2"`, "b"
					case "500":
						w.WriteHeader(500)
						return
					}
				}
				w.Header().Set("ETag", etag)
				http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(bytes.Repeat([]byte(fill), 300<<10)))
			}, func(c *Config) {
				c.Now = clk.Now
				c.MaxInflight = 2
				c.SliceBytes = 64 << 10
				c.RefreshTimeout = time.Second
			})
			if w := serve(h, "GET", "/obj"); w.Code != 200 || w.Body.Len() != 300<<10 {
				t.Fatalf("fill: %d %d", w.Code, w.Body.Len())
			}
			clk.Set(t0.Add(10 * time.Second))
			stale.Store(true)
			var w = serve(h, "GET", "/obj")
			if rng != "" {
				w = serve(h, "GET", "/obj", "Range", rng)
			}
			if w.Code != 200 && w.Code != 206 {
				t.Errorf("%s %q: stale answer %d %q", mode, rng, w.Code, w.Header().Get("Cache-Status"))
			}
			s37NoSlotsHeld(t, h, mode+" "+rng)
			// And the object is whole and consistent afterwards.
			if mode != "new" { // the origin stays at v2 once it has it
				stale.Store(false)
			}
			clk.Set(t0.Add(20 * time.Second))
			serve(h, "GET", "/obj")
			w = serve(h, "GET", "/obj")
			b := w.Body.Bytes()
			if w.Code != 200 || len(b) != 300<<10 || (bytes.Count(b, []byte("a")) != len(b) && bytes.Count(b, []byte("b")) != len(b)) {
				t.Errorf("%s %q: afterwards %d, %d bytes, mixed versions %v %q", mode, rng, w.Code, len(b), bytes.Count(b, []byte("a")) != len(b) && bytes.Count(b, []byte("b")) != len(b), w.Header().Get("Cache-Status"))
			}
			if strings.Contains(w.Header().Get("Cache-Status"), "stale") {
				t.Errorf("%s %q: still stale: %q", mode, rng, w.Header().Get("Cache-Status"))
			}
			s37NoSlotsHeld(t, h, mode+" "+rng+" after")
		}
	}
}
