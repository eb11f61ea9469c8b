package proxy

import (
	"sync/atomic"
	"testing"
)

// Regression test for a bug found in review: a second Range field line skips limitRanges; ServeContent reads the first.
func TestHostileRangeCapBypassTwoLines(t *testing.T) {
	var sent atomic.Int64
	h, _ := handlerProxy(t, rangeOrigin(10000, &sent), nil)
	serve(h, "GET", "/obj")
	spec := oneByteRanges(2000, 5)
	w := serve(h, "GET", "/obj", "Range", spec, "Range", "bytes=0-0")
	t.Logf("status %d, %d bytes for a 10000-byte object (request header %d bytes)", w.Code, w.Body.Len(), len(spec))
	if w.Body.Len() > 10000 {
		t.Errorf("range cap bypassed")
	}
}
