package proxy

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// rangeOriginFn serves size bytes validated by Last-Modified alone, with
// Range support.
func rangeOriginFn(size int) http.HandlerFunc {
	body := []byte(strings.Repeat("z", size))
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=600")
		w.Header().Set("Content-Type", "application/octet-stream")
		http.ServeContent(w, r, "", time.Date(2006, 1, 2, 15, 4, 5, 0, time.UTC), bytes.NewReader(body))
	}
}

// TestOnlyIfCachedOnAPartlySlicedObjectIs504 (a hostile review's): a
// client's only-if-cached request for a sliced object of which only slice
// 0 is stored must get a 504 (or the whole object), never a 200/206 whose
// body stops at the first missing slice, which is what the first version
// of errSliceNotCached sent (a cut connection). Every slice the answer may
// read is now looked up before the header (slicesStored).
func TestOnlyIfCachedOnAPartlySlicedObjectIs504(t *testing.T) {
	const size = 4000
	for _, tc := range []struct{ name, rg string }{{"whole", ""}, {"range-across", "bytes=0-2047"}} {
		t.Run(tc.name, func(t *testing.T) {
			h, calls := handlerProxy(t, rangeOriginFn(size), func(c *Config) { c.SliceBytes = 1024 })
			if w := serve(h, "GET", "/big", "Range", "bytes=0-9"); w.Code != 206 {
				t.Fatalf("prime: %d", w.Code)
			}
			before := calls.Load()
			hdr := []string{"Cache-Control", "only-if-cached"}
			if tc.rg != "" {
				hdr = append(hdr, "Range", tc.rg)
			}
			front := httptest.NewServer(h)
			defer front.Close()
			req, _ := http.NewRequest("GET", front.URL+"/big", nil)
			for i := 0; i+1 < len(hdr); i += 2 {
				req.Header.Set(hdr[i], hdr[i+1])
			}
			req.Host = "example.com"
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Errorf("only-if-cached with slice 0 stored and slice 1 not: the connection was cut (%v), neither the stored response nor a 504 (before 5cfbeaa the slice was fetched and the object served whole)", err)
				return
			}
			body, rerr := io.ReadAll(resp.Body)
			resp.Body.Close()
			t.Logf("%s: %d, %d body bytes, read err %v, Cache-Status %s, origin calls %d", tc.name, resp.StatusCode, len(body), rerr, resp.Header.Get("Cache-Status"), calls.Load()-before)
			if resp.StatusCode != http.StatusGatewayTimeout && rerr != nil {
				t.Errorf("only-if-cached answered %d and cut the body after %d bytes (%v): neither the stored response nor a 504 (before 5cfbeaa it was served whole)", resp.StatusCode, len(body), rerr)
			}
		})
	}
}

// TestOnlyIfCachedOnStoredSlices (held): only-if-cached on stored slices, a
// HEAD, and a fully stored object are answered from the store.
func TestOnlyIfCachedOnStoredSlices(t *testing.T) {
	const size = 4000
	h, calls := handlerProxy(t, rangeOriginFn(size), func(c *Config) { c.SliceBytes = 1024 })
	if w := serve(h, "GET", "/big", "Range", "bytes=0-9"); w.Code != 206 {
		t.Fatalf("prime: %d", w.Code)
	}
	if w := serve(h, "GET", "/big", "Range", "bytes=0-1023", "Cache-Control", "only-if-cached"); w.Code != 206 || w.Body.Len() != 1024 {
		t.Errorf("range in slice 0: %d %d", w.Code, w.Body.Len())
	}
	if w := serve(h, "HEAD", "/big", "Cache-Control", "only-if-cached"); w.Code != 200 {
		t.Errorf("HEAD: %d", w.Code)
	}
	if w := serve(h, "GET", "/big"); w.Code != 200 || w.Body.Len() != size {
		t.Fatalf("fill: %d %d", w.Code, w.Body.Len())
	}
	before := calls.Load()
	if w := serve(h, "GET", "/big", "Cache-Control", "only-if-cached"); w.Code != 200 || w.Body.Len() != size {
		t.Errorf("whole, all stored: %d %d", w.Code, w.Body.Len())
	}
	if calls.Load() != before {
		t.Errorf("origin asked %d times", calls.Load()-before)
	}
}

func TestCoveredSpan(t *testing.T) {
	const size = 1000
	for _, c := range []struct {
		rng, ifRange string
		from, to     int64
	}{
		{"", "", 0, 999},
		{"bytes=0-9", "", 0, 9},
		{"bytes=990-", "", 990, 999},
		{"bytes=-10", "", 990, 999},
		{"bytes=-5000", "", 0, 999},
		{"bytes=500-5000", "", 500, 999},
		{"bytes=0-9,20-29", "", 0, 999}, // several ranges: all
		{"bytes=0-9", `"v1"`, 0, 999},   // If-Range may ask for all
		{"bytes=9-0", "", 0, 999},       // malformed
		{"bytes=1000-", "", 0, 999},     // unsatisfiable: ServeContent's business
		{"bytes=-0", "", 0, 999},        // malformed
		{"items=0-9", "", 0, 999},       // not bytes
		{"bytes=x-9", "", 0, 999},       // malformed
		{"bytes=0-9x", "", 0, 999},      // malformed
		{"bytes= 0-9", "", 0, 9},        // white space ServeContent also skips
		{"bytes=99999999999999999999-", "", 0, 999},
	} {
		r, _ := http.NewRequest(http.MethodGet, "http://x/", nil)
		if c.rng != "" {
			r.Header.Set("Range", c.rng)
		}
		if c.ifRange != "" {
			r.Header.Set("If-Range", c.ifRange)
		}
		if from, to := coveredSpan(r, size); from != c.from || to != c.to {
			t.Errorf("Range %q If-Range %q: [%d, %d], want [%d, %d]", c.rng, c.ifRange, from, to, c.from, c.to)
		}
	}
}

// FuzzCoveredSpan: whatever the Range field says, the span lies within the
// object and covers every byte net/http's ServeContent would send for it.
func FuzzCoveredSpan(f *testing.F) {
	f.Add("bytes=0-9", int64(1000))
	f.Add("bytes=-10", int64(5))
	f.Add("bytes=0-9,20-29", int64(100))
	f.Fuzz(func(t *testing.T, rng string, size int64) {
		if size <= 0 || size > 1<<20 {
			return
		}
		r, _ := http.NewRequest(http.MethodGet, "http://x/", nil)
		r.Header["Range"] = []string{rng}
		from, to := coveredSpan(r, size)
		if from < 0 || to >= size || from > to {
			t.Fatalf("Range %q, size %d: [%d, %d] outside the object", rng, size, from, to)
		}
		w := httptest.NewRecorder()
		http.ServeContent(w, r, "", time.Time{}, strings.NewReader(strings.Repeat("x", int(size))))
		if w.Code != http.StatusPartialContent {
			return // whole (inside the span only if it is all) or refused
		}
		cr := w.Header().Get("Content-Range")
		if cr == "" {
			return // multipart: the span is all
		}
		var a, b, total int64
		if _, err := fmt.Sscanf(cr, "bytes %d-%d/%d", &a, &b, &total); err != nil {
			t.Fatalf("Content-Range %q: %v", cr, err)
		}
		if a < from || b > to {
			t.Fatalf("Range %q, size %d: ServeContent sent %d-%d outside the span [%d, %d]", rng, size, a, b, from, to)
		}
	})
}
