package proxy

// Hostile review s37 of background refreshes taking upstream slots
// (0138b3d): no outcome of a refresh may keep its slot, and no page may
// stay stale for good.

import (
	"bytes"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

func s37NoSlotsHeld(t *testing.T, h *Handler, what string) {
	t.Helper()
	h.Wait()
	deadline := time.Now().Add(3 * time.Second)
	for {
		used, _ := h.UpstreamBySite()
		total := 0
		for _, n := range used {
			total += n
		}
		if total == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("%s: slots held after the refresh: %v", what, used)
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	expectNothingHeld(t, h, what)
}

// TestS37RefreshOutcomesGiveTheirSlotBack: each way a refresh can end
// (origin error, reset, timeout, 304, uncacheable, a large body filled, a
// body too large to keep, a body slower than RefreshTimeout, a purge while
// it runs) leaves no slot held, under limits.max_inflight 1, and the page
// is refreshed by a later request once the origin is well again.
func TestS37RefreshOutcomesGiveTheirSlotBack(t *testing.T) {
	big := bytes.Repeat([]byte("b"), 600<<10)
	for _, mode := range []string{"500", "reset", "hang", "304", "nostore", "private", "big", "toolarge", "slowbody", "purge", "vary"} {
		t.Run(mode, func(t *testing.T) {
			clk := &clock{now: t0}
			var stale atomic.Bool
			var version atomic.Int64
			purgeNow := make(chan struct{}, 1)
			purged := make(chan struct{})
			h, _ := handlerProxy(t, func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Date", clk.Now().Format(http.TimeFormat))
				w.Header().Set("Cache-Control", "max-age=1, stale-while-revalidate=600")
				w.Header().Set("ETag", `"v1"`)
				if !stale.Load() {
					v := version.Add(1)
					_, _ = w.Write([]byte("page v" + strconv.FormatInt(v, 10)))
					return
				}
				switch mode {
				case "500":
					w.WriteHeader(500)
				case "reset":
					c, _, _ := http.NewResponseController(w).Hijack()
					c.Close()
				case "hang":
					<-r.Context().Done()
				case "304":
					if r.Header.Get("If-None-Match") == `"v1"` {
						w.WriteHeader(304)
						return
					}
					_, _ = w.Write([]byte("unconditional?"))
				case "nostore":
					w.Header().Set("Cache-Control", "no-store")
					_, _ = w.Write([]byte("nostore"))
				case "private":
					w.Header().Set("Cache-Control", "private, max-age=60")
					_, _ = w.Write([]byte("private"))
				case "big":
					w.Header().Set("ETag", `"v2"`)
					for i := 0; i < 192<<10; i += 32 << 10 {
						_, _ = w.Write(big[i : i+32<<10])
						w.(http.Flusher).Flush()
					}
				case "toolarge":
					w.Header().Set("ETag", `"v2"`)
					w.Header().Set("Content-Length", strconv.Itoa(len(big)))
					_, _ = w.Write(big)
				case "slowbody":
					w.Header().Set("ETag", `"v2"`)
					w.Header().Set("Content-Length", "100000")
					_, _ = w.Write([]byte("x"))
					w.(http.Flusher).Flush()
					<-r.Context().Done()
				case "purge":
					purgeNow <- struct{}{}
					<-purged
					w.Header().Set("ETag", `"v2"`)
					_, _ = w.Write([]byte("after purge"))
				case "vary":
					w.Header().Set("ETag", `"v2"`)
					w.Header().Set("Vary", "X-Other")
					_, _ = w.Write([]byte("varied"))
				}
			}, func(c *Config) {
				c.Now = clk.Now
				c.MaxInflight = 1
				c.RefreshTimeout = 300 * time.Millisecond
				c.MaxObjectBytes = 256 << 10
			})
			if w := serve(h, "GET", "/p"); w.Code != 200 {
				t.Fatalf("fill: %d", w.Code)
			}
			clk.Set(t0.Add(10 * time.Second))
			stale.Store(true)
			if mode == "purge" {
				go func() {
					<-purgeNow
					_, _ = h.Purge(PurgeRequest{URL: "http://example.com/p"})
					close(purged)
				}()
			}
			w := serve(h, "GET", "/p") // serve waits for the refresh (h.Wait)
			if w.Code != 200 || !strings.Contains(w.Header().Get("Cache-Status"), "hit") {
				t.Errorf("stale answer: %d %q %q", w.Code, w.Header().Get("Cache-Status"), w.Body.String())
			}
			s37NoSlotsHeld(t, h, mode)
			if n := testutil.ToFloat64(h.metrics.Refreshes.WithLabelValues(refreshRefused)); n != 0 {
				t.Errorf("a refresh with the only slot free was refused (%v)", n)
			}

			// Well again: a later request refreshes (or refetches) it and the
			// one after is a fresh hit.
			stale.Store(false)
			clk.Set(t0.Add(20 * time.Second))
			serve(h, "GET", "/p")
			w = serve(h, "GET", "/p")
			cs := w.Header().Get("Cache-Status")
			// After an uncacheable answer the URL is passed for a while
			// (hit-for-pass), which is not staleness.
			passed := (mode == "nostore" || mode == "private" || mode == "toolarge") && strings.Contains(cs, "fwd=bypass")
			if w.Code != 200 || (!passed && !strings.Contains(cs, "hit")) || strings.Contains(cs, "stale") || !strings.HasPrefix(w.Body.String(), "page v") {
				t.Errorf("after the origin recovered: %d %q %q", w.Code, cs, w.Body.String())
			}
			s37NoSlotsHeld(t, h, mode+" (after)")
		})
	}
}
