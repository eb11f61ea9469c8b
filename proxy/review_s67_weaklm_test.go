package proxy

import (
	"bytes"
	"net/http"
	"sync"
	"testing"
	"time"
)

// TestS67SameSecondLastModifiedIsNoStrongValidatorForSlices: an object
// with no ETag whose Last-Modified is its Date (written in the second it
// was served) has no strong validator (RFC 9110 §8.8.2.2: a Last-Modified
// is strong for a cache only when its entry's Date is at least a second
// later), and ranges may be combined only under a strong validator shared
// by all of them (RFC 9110 §15.3.7.3, RFC 9111 §3.4). sliceable accepts
// any Last-Modified, and sameObject compares only its value: the object
// rewritten within that second (same length) has slice 0 from the first
// write and the rest from the second, in one 200.
func TestS67SameSecondLastModifiedIsNoStrongValidatorForSlices(t *testing.T) {
	const size = 3 << 20
	v1, v2 := make([]byte, size), make([]byte, size)
	for i := range v1 {
		v1[i] = byte('a' + i%26)
		v2[i] = byte('A' + i%26)
	}
	lm := time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
	var mu sync.Mutex
	cur, date := v1, lm
	h, _ := handlerProxy(t, func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		body, d := cur, date
		mu.Unlock()
		w.Header().Set("Cache-Control", "public, max-age=3600")
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("Date", d.Format(http.TimeFormat))
		http.ServeContent(w, r, "", lm, bytes.NewReader(body)) // Last-Modified, no ETag
	}, func(c *Config) {
		c.SliceBytes = 1 << 20
		c.MaxObjectBytes = 1 << 20
		c.Now = func() time.Time { return lm }
	})

	w := serve(h, "GET", "/log.bin", "Range", "bytes=0-9")
	if w.Code != http.StatusPartialContent || w.Body.String() != string(v1[:10]) {
		t.Fatalf("first range: %d %q", w.Code, w.Body.String())
	}
	// Rewritten within the same second: same length, same Last-Modified.
	mu.Lock()
	cur, date = v2, lm.Add(5*time.Second)
	mu.Unlock()
	w = serve(h, "GET", "/log.bin")
	got := w.Body.Bytes()
	if w.Code == http.StatusOK && len(got) == size && !bytes.Equal(got, v1) && !bytes.Equal(got, v2) {
		t.Fatalf("one 200 (Cache-Status %q): bytes 0-%d of the first write, the second write's from byte %d on",
			w.Header().Get("Cache-Status"), s67FirstDiff(got, v1)-1, s67FirstDiff(got, v1))
	}
}
