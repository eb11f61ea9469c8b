package proxy

import (
	"bytes"
	"net/http/httptest"
	"testing"
	"time"
)

// TestS40StreamReaderThatJoinsARefusedSliceFlightIsNotCut: 92563b2 lets a
// reader that joined a slice flight whose leader was refused an upstream
// slot (errOverload: the leader's client at its bound) ask again, in
// slicer.slice. The same flight is joined from slicer.fromStream too: the
// leader of the object's fill, reading its slices from the origin's own
// 200, joins a Range reader's flight for the slice it is at. When that
// Range reader is refused a slot, the stream reader gets its errOverload,
// closes its stream and ends its response short: a whole GET that holds
// its own upstream connection is cut because another client hit its
// limit.
func TestS40StreamReaderThatJoinsARefusedSliceFlightIsNotCut(t *testing.T) {
	const slice = 1 << 20
	o := newSliceOrigin(3 * slice)
	h := sliceProxy(t, o)

	// A: a whole GET of the uncached object, whose client stops reading
	// at the end of slice 0 (the slicer reads slice 1 from the stream
	// next).
	aw := newPausingWriter(slice)
	aDone := make(chan struct{})
	var aborted any
	go func() {
		defer close(aDone)
		defer func() { aborted = recover() }() // the connection cut (http.ErrAbortHandler)
		h.ServeHTTP(aw, httptest.NewRequest("GET", "http://example.com/movie.mp4", nil))
	}()
	select {
	case <-aw.reached:
	case <-time.After(3 * time.Second):
		t.Fatal("A never wrote slice 0")
	}
	key := h.requestKey(httptest.NewRequest("GET", "http://example.com/movie.mp4", nil))
	skey := sliceKey(key, 1)

	// B: a Range reader of slice 1 whose fetch leads the slice's flight
	// and is refused a slot (fetchSliceAs's acquireUpstream), held still
	// until A has joined.
	release, led := refusedSliceFlight(t, h, skey)
	close(aw.gate) // A reads on
	joined := false
	deadline := time.Now().Add(2 * time.Second)
	for time.Now().Before(deadline) && !joined {
		h.slices.mu.Lock()
		if f := h.slices.m[skey]; f != nil && f.waiters > 0 {
			joined = true
		}
		h.slices.mu.Unlock()
		time.Sleep(2 * time.Millisecond)
	}
	release()
	<-led
	select {
	case <-aDone:
	case <-time.After(4 * time.Second):
		t.Fatal("A never finished")
	}
	h.Wait()
	if !joined {
		t.Skip("A's stream read did not join B's flight (nothing to show)")
	}
	aw.mu.Lock()
	got := aw.buf.Bytes()
	aw.mu.Unlock()
	if aborted != nil || aw.code != 200 || !bytes.Equal(got, o.body) {
		t.Fatalf("A (a whole GET reading its own origin stream) got %d with %d of %d bytes (handler panic: %v: the connection cut), after joining the slice flight of a reader refused an upstream slot: "+
			"fromStream returns the flight's errOverload (the ask-again of 92563b2 is in slice only), which cuts A's answer", aw.code, len(got), len(o.body), aborted)
	}
}
