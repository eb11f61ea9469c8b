package proxy

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
)

func rangeOriginFn(size int) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		body := []byte(strings.Repeat("z", size))
		w.Header().Set("Cache-Control", "max-age=600")
		w.Header().Set("Last-Modified", "Mon, 02 Jan 2006 15:04:05 GMT")
		w.Header().Set("Content-Type", "application/octet-stream")
		rg := r.Header.Get("Range")
		if rg == "" {
			_, _ = w.Write(body)
			return
		}
		a, b, _ := strings.Cut(strings.TrimPrefix(rg, "bytes="), "-")
		ai, _ := strconv.Atoi(a)
		bi, err := strconv.Atoi(b)
		if err != nil || bi >= size {
			bi = size - 1
		}
		w.Header().Set("Content-Range", fmt.Sprintf("bytes %d-%d/%d", ai, bi, size))
		w.Header().Set("Content-Length", strconv.Itoa(bi-ai+1))
		w.WriteHeader(http.StatusPartialContent)
		_, _ = w.Write(body[ai : bi+1])
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
