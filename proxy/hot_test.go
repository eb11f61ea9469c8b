package proxy

import (
	"strconv"
	"testing"
	"unsafe"
)

func TestHotKeysFindsTheHeavyHitters(t *testing.T) {
	h := newHotKeys(8)
	for i := range 160000 {
		switch {
		case i%2 == 0:
			h.observe("/hot")
		case i%4 == 1:
			h.observe("/warm")
		default:
			h.observe("/cold/" + strconv.Itoa(i))
		}
	}
	top := h.top(2)
	if len(top) != 2 || top[0].Key != "/hot" || top[1].Key != "/warm" {
		t.Fatalf("top %v", top)
	}
	if est := top[0].Requests; est < 70000 || est > 90000 {
		t.Errorf("estimate for /hot %d, want about 80000", est)
	}
}

// The hit path hands observe a view of a buffer it reuses (AppendHit): a
// key the sample keeps must be a copy, or the next request's key would
// rewrite it in the map.
func TestHotKeysKeepCopiesOfViews(t *testing.T) {
	h := newHotKeys(4)
	buf := []byte("http://a.test/first")
	view := unsafe.String(unsafe.SliceData(buf), len(buf))
	for range 100 * hotSampleEvery { // sampled one in hotSampleEvery
		h.observe(view)
	}
	copy(buf, "http://a.test/XXXXX")
	top := h.top(4)
	if len(top) != 1 || top[0].Key != "http://a.test/first" {
		t.Fatalf("kept keys %v, want the copy of http://a.test/first", top)
	}
}
