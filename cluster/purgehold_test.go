package cluster

import (
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestCopyHold: a peer's page may be kept only if no hold naming its key
// was on at any moment of its fetch.
func TestCopyHold(t *testing.T) {
	var h copyHold
	t0 := time.Unix(1000, 0)
	aOnly := func(key string, _ http.Header) bool { return strings.HasPrefix(key, "a") }
	m := h.mark(t0)
	if !h.keepable(m, "a1", nil, 0, t0.Add(time.Second)) {
		t.Error("no hold at all: not keepable")
	}
	h.start("", aOnly, t0.Add(time.Second), 2*time.Second) // on from 1 s to 3 s
	if h.keepable(m, "a1", nil, 0, t0.Add(5*time.Second)) {
		t.Error("a hold naming the key began during the fetch (and ended before its end): keepable")
	}
	if !h.keepable(m, "b1", nil, 0, t0.Add(5*time.Second)) {
		t.Error("a hold not naming the key held it back")
	}
	if during := h.mark(t0.Add(2 * time.Second)); h.keepable(during, "a1", nil, 0, t0.Add(4*time.Second)) {
		t.Error("a fetch begun during the hold: keepable")
	}
	if after := h.mark(t0.Add(3 * time.Second)); !h.keepable(after, "a1", nil, 0, t0.Add(4*time.Second)) {
		t.Error("a fetch begun and ended after the hold: not keepable")
	}
	// The sender's hold lasts until it ends it, however long.
	e := h.start("", nil, t0.Add(10*time.Second), 0)
	if m := h.mark(t0.Add(20 * time.Second)); h.keepable(m, "b1", nil, 0, t0.Add(30*time.Second)) {
		t.Error("an open hold of every key let a page be kept")
	}
	h.end(e, t0.Add(40*time.Second))
	if m := h.mark(t0.Add(41 * time.Second)); !h.keepable(m, "b1", nil, 0, t0.Add(42*time.Second)) {
		t.Error("an ended hold still holds")
	}
	// A fetch older than what is remembered keeps nothing: this one began
	// while e was on, which is forgotten by the time it ends.
	old := holdMark{seq: e.seq, at: t0.Add(35 * time.Second)}
	if h.keepable(old, "b1", nil, 0, t0.Add(40*time.Second+keepEnded+time.Minute)) {
		t.Error("a fetch that began before a forgotten hold ended was kept")
	}
	if fresh := h.mark(t0.Add(40*time.Second + keepEnded + 2*time.Minute)); !h.keepable(fresh, "b1", nil, 0, t0.Add(40*time.Second+keepEnded+2*time.Minute+time.Second)) {
		t.Error("a fetch after every hold was forgotten: not keepable")
	}
	// A page made before a purge that names it, reaching this node after
	// the hold (through a peer that still streams it), is not kept; one made
	// after it is.
	var g copyHold
	e2 := g.start("", aOnly, t0, 0)
	g.end(e2, t0.Add(time.Second))
	late := g.mark(t0.Add(10 * time.Second))
	if g.keepable(late, "a1", nil, 12*time.Second, t0.Add(11*time.Second)) {
		t.Error("a page made before the purge (Age 12 s at 11 s after it) was kept")
	}
	if !g.keepable(late, "a1", nil, 2*time.Second, t0.Add(11*time.Second)) {
		t.Error("a page made 9 s after the purge was not kept")
	}
	if !g.keepable(late, "b1", nil, 12*time.Second, t0.Add(11*time.Second)) {
		t.Error("an old page the purge does not name was not kept")
	}
	// A tag purge names the answers that carry the tag.
	var tg copyHold
	tagged := func(_ string, hdr http.Header) bool { return hdr.Get("Surrogate-Key") == "t" }
	e3 := tg.start("", tagged, t0, 0)
	tg.end(e3, t0.Add(time.Second))
	later := tg.mark(t0.Add(10 * time.Second))
	if tg.keepable(later, "x", http.Header{"Surrogate-Key": {"t"}}, time.Minute, t0.Add(11*time.Second)) {
		t.Error("an old page carrying the purged tag was kept")
	}
	if !tg.keepable(later, "x", http.Header{}, time.Minute, t0.Add(11*time.Second)) {
		t.Error("an old page without the purged tag was not kept")
	}
	// A URL purge's hold is found by its key, its slices' keys too.
	var u copyHold
	e4 := u.start("http://s/a", nil, t0, 0)
	u.end(e4, t0.Add(time.Second))
	at := u.mark(t0.Add(10 * time.Second))
	for key, want := range map[string]bool{"http://s/a": false, "http://s/a\x00slice=3": false, "http://s/ab": true, "http://s/b": true} {
		if got := u.keepable(at, key, nil, time.Minute, t0.Add(11*time.Second)); got != want {
			t.Errorf("after a purge of http://s/a, an old page under %q keepable %v, want %v", key, got, want)
		}
	}
}

// TestKeepableRightAfterAHoldIsForgotten: a fetch that began during a
// hold and ends just over keepEnded after the hold ended, less than a
// second after another keep decision (the prune runs once a second), was
// kept: the hold was skipped and not yet counted as forgotten (a review's
// test).
func TestKeepableRightAfterAHoldIsForgotten(t *testing.T) {
	t0 := time.Unix(1_000_000, 0)
	const key = "http://s/big.iso"
	var h copyHold
	h.start(key, nil, t0, time.Second)
	m := h.mark(t0.Add(500 * time.Millisecond)) // the fetch begins during the hold
	other := t0.Add(time.Second + keepEnded - 100*time.Millisecond)
	h.keepable(h.mark(other), "http://s/other", nil, 0, other)
	if end := other.Add(600 * time.Millisecond); h.keepable(m, key, nil, 0, end) {
		t.Error("a page fetched from a peer from during a purge's hold was kept")
	}
}

// TestAURLHoldIsFoundWhateverNULsTheKeyHolds: a URL purge's hold is found
// for its own key whatever NUL bytes come before its URL (a site name
// once could hold one), and for the keys that extend it after a NUL.
func TestAURLHoldIsFoundWhateverNULsTheKeyHolds(t *testing.T) {
	t0 := time.Unix(1_000_000, 0)
	for _, base := range []string{"http://s/a", "shop\x00x http://s/a"} {
		var h copyHold
		h.start(base, nil, t0, 0) // an open hold
		for _, key := range []string{base, base + "\x00slice=1", base + "\x00fields a"} {
			if h.keepable(h.mark(t0), key, nil, 0, t0.Add(time.Second)) {
				t.Errorf("purge of %q: a peer's page under %q kept while it goes round", base, key)
			}
		}
	}
}
