package proxy

import (
	"bytes"
	"context"
	"net/http"
	"testing"
)

// TestS70SlicesOnDiskKeepTheirCutAcrossARestart: a sliced object stored
// on the disk tier, read after a restart with the same slice size, is
// served from its stored slices (no range goes upstream), and no client
// answer carries the slice mark.
func TestS70SlicesOnDiskKeepTheirCutAcrossARestart(t *testing.T) {
	o := newSliceOrigin(5 << 19) // 2.5 MiB
	dir := t.TempDir()
	cfg := func(c *Config) { c.SliceBytes = 1 << 20; c.MaxObjectBytes = 1 << 20 }
	h1, _ := handlerProxy(t, o.serve, cfg)
	tier := tierAt(t, dir, nil)
	h1.store.AttachDisk(tier, TierOptions{})
	if w := serve(h1, "GET", "/movie.mp4"); !bytes.Equal(w.Body.Bytes(), o.body) {
		t.Fatal("first read")
	}
	flushTier(t, tier)
	if err := tier.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	h2, _ := handlerProxy(t, o.serve, cfg)
	tier2 := tierAt(t, dir, nil)
	t.Cleanup(func() { _ = tier2.Close(context.Background()) })
	h2.store.AttachDisk(tier2, TierOptions{})
	ranged, whole := o.ranged.Load(), o.whole.Load()
	for _, rg := range []string{"bytes=1048576-1048591", "bytes=2097152-2097167", "bytes=0-15"} {
		w := serve(h2, "GET", "/movie.mp4", "Range", rg)
		if w.Code != http.StatusPartialContent {
			t.Fatalf("%s: %d", rg, w.Code)
		}
		for k := range w.Header() {
			if k == "Edge-Slice-Of" || k == "Edge-Slice-Size" {
				t.Errorf("%s: client answer carries %s", rg, k)
			}
		}
	}
	for _, m := range []string{"GET", "HEAD"} {
		w := serve(h2, m, "/movie.mp4")
		if w.Header().Get("Edge-Slice-Of") != "" || w.Header().Get("Edge-Slice-Size") != "" {
			t.Errorf("%s: client answer carries a slice mark: %v", m, w.Header())
		}
		if m == "GET" && !bytes.Equal(w.Body.Bytes(), o.body) {
			t.Errorf("GET after restart: first wrong byte at %d", s67FirstDiff(w.Body.Bytes(), o.body))
		}
	}
	if d1, d2 := o.ranged.Load()-ranged, o.whole.Load()-whole; d1 != 0 || d2 != 0 {
		t.Errorf("after a restart with the same slice size: %d ranges and %d whole fetches went upstream; want the stored slices", d1, d2)
	}
}

// TestS70OriginCannotForgeTheSliceMark: an origin that sends
// Edge-Slice-Of and Edge-Slice-Size itself neither reaches clients with
// them nor changes what the edge serves.
func TestS70OriginCannotForgeTheSliceMark(t *testing.T) {
	o := newSliceOrigin(5 << 19)
	forge := func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Edge-Slice-Of", "2621440/1048576")
		w.Header().Set("Edge-Slice-Size", "99/1")
		o.serve(w, r)
	}
	h, _ := handlerProxy(t, forge, func(c *Config) { c.SliceBytes = 1 << 20; c.MaxObjectBytes = 1 << 20 })
	for range 2 {
		w := serve(h, "GET", "/movie.mp4")
		if !bytes.Equal(w.Body.Bytes(), o.body) {
			t.Fatalf("GET: %d, first wrong byte at %d", w.Code, s67FirstDiff(w.Body.Bytes(), o.body))
		}
		if w.Header().Get("Edge-Slice-Of") != "" || w.Header().Get("Edge-Slice-Size") != "" {
			t.Errorf("client answer carries the origin's slice fields: %v", w.Header())
		}
		w = serve(h, "GET", "/movie.mp4", "Range", "bytes=2097152-2097167")
		if w.Code != http.StatusPartialContent || !bytes.Equal(w.Body.Bytes(), o.body[2<<20:2<<20+16]) {
			t.Errorf("range: %d %x", w.Code, w.Body.Bytes())
		}
		if w.Header().Get("Edge-Slice-Of") != "" {
			t.Errorf("range answer carries Edge-Slice-Of")
		}
	}
}
