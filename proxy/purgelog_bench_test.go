package proxy

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
)

// BenchmarkTouchedFullLogOfTagPurges: one fill's check (touched, under
// the log's one mutex) when the log holds 1,024 tag purges of other tags
// and the answer carries 30 tags (a review's: 0.98 ms, 983 KB and 4,096
// allocations when each record parsed the header again).
func BenchmarkTouchedFullLogOfTagPurges(b *testing.B) {
	var l purgeLog
	for i := range purgeLogSize {
		l.begin(nil, fmt.Sprintf("other-%d", i))
	}
	var tags []string
	for i := range 30 {
		tags = append(tags, fmt.Sprintf("article-%d", i))
	}
	hdr := http.Header{"Surrogate-Key": {strings.Join(tags, " ")}}
	from := l.Load() - purgeLogSize
	b.ReportAllocs()
	for b.Loop() {
		if l.touched(from, l.Load(), "http://example.com/a", hdr) {
			b.Fatal("touched")
		}
	}
}
