package proxy

import (
	"bytes"
	"context"
	"net/http"
	"testing"
)

// s67FirstDiff is the first offset at which got and want differ (-1: equal).
func s67FirstDiff(got, want []byte) int {
	for i := range want {
		if i >= len(got) || got[i] != want[i] {
			return i
		}
	}
	if len(got) != len(want) {
		return len(want)
	}
	return -1
}

// TestS67NewManifestAfterASliceSizeChangeReadsAnOldSlice: the manifest
// records the slice size it was cut in, so an old manifest reads its old
// slices at their old offsets. But slices are keyed by index alone, and a
// stored slice is taken for a new manifest's when its ETag and its length
// match (isSlice). After cache.slice_bytes changes (a restart that keeps
// the disk tier), the first new manifest of the very same object (same
// strong ETag, same bytes: a reload, or an origin that answers a
// revalidation 200) finds the old last slice — 2 MiB..2.5 MiB, 512 KiB
// long — under index 2, where the new cut puts 1 MiB..1.5 MiB, also
// 512 KiB long. It is sent at the wrong offset inside a 200 that claims
// the object whole.
func TestS67NewManifestAfterASliceSizeChangeReadsAnOldSlice(t *testing.T) {
	o := newSliceOrigin(5 << 19) // 2.5 MiB
	dir := t.TempDir()

	h1, _ := handlerProxy(t, o.serve, func(c *Config) { c.SliceBytes = 1 << 20; c.MaxObjectBytes = 1 << 20 })
	tier := tierAt(t, dir, nil)
	h1.store.AttachDisk(tier, TierOptions{})
	if w := serve(h1, "GET", "/movie.mp4"); !bytes.Equal(w.Body.Bytes(), o.body) {
		t.Fatal("first read")
	}
	flushTier(t, tier)
	if err := tier.Close(context.Background()); err != nil {
		t.Fatal(err)
	}

	// Restart with cache.slice_bytes = 512 KiB; the disk keeps the old
	// manifest and its three slices.
	h2, _ := handlerProxy(t, o.serve, func(c *Config) { c.SliceBytes = 1 << 19; c.MaxObjectBytes = 1 << 19 })
	tier2 := tierAt(t, dir, nil)
	t.Cleanup(func() { _ = tier2.Close(context.Background()) })
	h2.store.AttachDisk(tier2, TierOptions{})
	if w := serve(h2, "GET", "/movie.mp4"); !bytes.Equal(w.Body.Bytes(), o.body) {
		t.Fatalf("old manifest after the restart: %d, %d bytes, first wrong byte at %d", w.Code, w.Body.Len(), s67FirstDiff(w.Body.Bytes(), o.body))
	}
	// A reload: the origin answers 200 (same ETag, same bytes), and the
	// edge stores a new manifest cut in 512 KiB slices.
	w := serve(h2, "GET", "/movie.mp4", "Cache-Control", "no-cache")
	if w.Code != http.StatusOK || !bytes.Equal(w.Body.Bytes(), o.body) {
		t.Fatalf("reload: %d, %d bytes of %d, first wrong byte at %d (Cache-Status %q)",
			w.Code, w.Body.Len(), len(o.body), s67FirstDiff(w.Body.Bytes(), o.body), w.Header().Get("Cache-Status"))
	}
	w = serve(h2, "GET", "/movie.mp4", "Range", "bytes=1048576-1048591")
	if w.Code != http.StatusPartialContent || !bytes.Equal(w.Body.Bytes(), o.body[1<<20:1<<20+16]) {
		t.Fatalf("range of the new manifest at 1 MiB: %d %x, want %x (bytes at 2 MiB are %x)",
			w.Code, w.Body.Bytes(), o.body[1<<20:1<<20+16], o.body[2<<20:2<<20+16])
	}
}

// TestS67SameETagNewLengthServesTheOldSlices: defence in depth (the origin
// breaks RFC 9110 §8.8.3 by keeping a strong ETag across a change). The
// origin answers a reload with a 3 MiB body under the ETag the stored
// 2.5 MiB object had. The edge has both lengths in hand (the manifest
// records the total), yet isSlice takes the stored 1 MiB slices 0 and 1
// of the old object for the new manifest's: the leader, holding the new
// body's stream, sends the old object's first 2 MiB before the new one's
// last MiB.
func TestS67SameETagNewLengthServesTheOldSlices(t *testing.T) {
	o := newSliceOrigin(5 << 19) // 2.5 MiB, ETag "v1"
	h, _ := handlerProxy(t, o.serve, func(c *Config) { c.SliceBytes = 1 << 20; c.MaxObjectBytes = 1 << 20 })
	if w := serve(h, "GET", "/movie.mp4"); !bytes.Equal(w.Body.Bytes(), o.body) {
		t.Fatal("first read")
	}
	v2 := make([]byte, 3<<20)
	for i := range v2 {
		v2[i] = ^byte(i * 5)
	}
	o.body = v2 // no request in flight
	w := serve(h, "GET", "/movie.mp4", "Cache-Control", "no-cache")
	if w.Code != http.StatusOK || !bytes.Equal(w.Body.Bytes(), v2) {
		t.Fatalf("reload answered %d with %d bytes (origin sent %d), first byte not the origin's at %d (Cache-Status %q)",
			w.Code, w.Body.Len(), len(v2), s67FirstDiff(w.Body.Bytes(), v2), w.Header().Get("Cache-Status"))
	}
}
