package proxy

import (
	"strconv"
	"testing"
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
