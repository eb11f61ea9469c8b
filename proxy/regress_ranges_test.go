package proxy

import (
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
)

// Regression test for a bug found in review: a second Range field line skips limitRanges; ServeContent reads the first.
func TestHostileRangeCapBypassTwoLines(t *testing.T) {
	var sent atomic.Int64
	h, _ := handlerProxy(t, rangeOrigin(10000, &sent), nil)
	serve(h, "GET", "/obj")
	var spec strings.Builder
	spec.WriteString("bytes=")
	for i := range 2000 {
		if i > 0 {
			spec.WriteByte(',')
		}
		fmt.Fprintf(&spec, "%d-%d", i*5, i*5)
	}
	w := serve(h, "GET", "/obj", "Range", spec.String(), "Range", "bytes=0-0")
	t.Logf("status %d, %d bytes for a 10000-byte object (request header %d bytes)", w.Code, w.Body.Len(), spec.Len())
	if w.Body.Len() > 10000 {
		t.Errorf("range cap bypassed")
	}
}
