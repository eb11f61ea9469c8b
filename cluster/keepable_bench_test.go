package cluster

import (
	"net/http"
	"strconv"
	"testing"
	"time"
)

// BenchmarkKeepableManyHolds: a peer answer's keep decision with n URL purges remembered.
func BenchmarkKeepableManyHolds(b *testing.B) {
	for _, n := range []int{10, 600, 6000} {
		b.Run(strconv.Itoa(n), func(b *testing.B) {
			var h copyHold
			now := time.Now()
			for i := range n {
				k := "http://site.example/page/" + strconv.Itoa(i)
				e := h.start(k, nil, now, 0)
				h.end(e, now)
			}
			m := h.mark(now.Add(time.Second))
			hdr := http.Header{}
			b.ResetTimer()
			for range b.N {
				h.keepable(m, "http://site.example/page/x", hdr, time.Second, now.Add(2*time.Second))
			}
		})
	}
}
