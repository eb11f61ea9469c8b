package fdlab

import (
	"testing"
	"time"

	"github.com/edgecache/edge/fdetect"
)

// BenchmarkDetectors measures Observe + Freshness per heartbeat on a
// generated trace, for every detector with a per-heartbeat cost.
func BenchmarkDetectors(b *testing.B) {
	c, as := generated(b, 10*time.Minute, 1)
	for _, v := range []struct {
		name, detector string
		params         fdetect.Params
	}{
		{"chen", "chen", nil}, {"bertier", "bertier", nil}, {"phi", "phi", nil}, {"twowindows", "twowindows", nil},
		{"ml", "ml", nil}, {"ml-time", "ml", fdetect.Params{"time_objective": 1, "quantile": 0.99, "pause_ms": 500}},
	} {
		b.Run(v.name, func(b *testing.B) {
			d, _ := fdetect.New(v.detector, int64(c.Period), v.params)
			b.ReportAllocs()
			i := 0
			var sink int64
			for b.Loop() {
				a := as[i%len(as)]
				d.Observe(a.Seq+uint64(i/len(as))*uint64(len(as)*2), a.Recv+int64(i/len(as))*int64(c.Duration)*2)
				sink += d.Freshness()
				i++
			}
			_ = sink
		})
	}
}
