package cluster

import (
	"testing"
	"time"
)

// TestCopyHold: a page may be kept only if no hold was on when its fetch
// began, none is on when it ends, and none began in between.
func TestCopyHold(t *testing.T) {
	var h copyHold
	t0 := time.Unix(1000, 0)
	m := h.mark(t0)
	if !h.clearSince(m, t0.Add(time.Second)) {
		t.Error("no hold at all: not clear")
	}
	h.start(t0.Add(time.Second), 2*time.Second) // on from 1 s to 3 s
	if h.clearSince(m, t0.Add(5*time.Second)) {
		t.Error("a hold began during the fetch (and ended before its end): clear")
	}
	during := h.mark(t0.Add(2 * time.Second))
	if !during.held || h.clearSince(during, t0.Add(4*time.Second)) {
		t.Error("a fetch begun during the hold: clear")
	}
	after := h.mark(t0.Add(3 * time.Second))
	if after.held || !h.clearSince(after, t0.Add(4*time.Second)) {
		t.Error("a fetch begun and ended after the hold: not clear")
	}
	h.start(t0.Add(4*time.Second), time.Second)
	h.start(t0.Add(4*time.Second), 10*time.Millisecond) // a shorter hold does not end a longer one
	if m := h.mark(t0.Add(4*time.Second + 500*time.Millisecond)); !m.held {
		t.Error("a shorter hold cut a longer one short")
	}
}
