package cluster

import (
	"math"
	"runtime/metrics"
	"time"
)

// schedWatch measures how late this process itself gets to run, so that the
// failure detector does not blame a peer for our own starvation. On a
// CPU-saturated machine a heartbeat can sit in the socket buffer while the
// goroutine that reads it waits for a CPU; the monitor, scheduled on time,
// would then see a silent peer that is not silent. Two signals:
//   - the Go scheduler's run-queue latency (runtime/metrics
//     /sched/latencies:seconds): the longest a goroutine waited to run since
//     the last look;
//   - the monitor's own ticker lag, which also catches the whole process
//     being descheduled by the kernel.
//
// The worst delay seen over the last window is added to every freshness
// point before suspecting: a peer is suspected only when it is late by more
// than we ourselves were.
type schedWatch struct {
	sample   []metrics.Sample
	runQueue bool // read the runtime's run-queue latency (not in virtual time: Config.runQueueBlind)
	prev     []uint64
	window   time.Duration
	recent   []stamped // delays seen, oldest first, within window
}

type stamped struct {
	at    time.Time
	delay time.Duration
}

const schedLatencies = "/sched/latencies:seconds"

// newSchedWatch watches over window; runQueue false leaves the runtime's
// run-queue latency out (Config.runQueueBlind), the ticker lag alone then
// guarding.
func newSchedWatch(window time.Duration, runQueue bool) *schedWatch {
	w := &schedWatch{sample: []metrics.Sample{{Name: schedLatencies}}, window: window, runQueue: runQueue}
	if !runQueue {
		return w
	}
	metrics.Read(w.sample)
	if h := w.histogram(); h != nil {
		w.prev = append([]uint64(nil), h.Counts...)
	}
	return w
}

func (w *schedWatch) histogram() *metrics.Float64Histogram {
	if w.sample[0].Value.Kind() != metrics.KindFloat64Histogram {
		return nil // not in this runtime: the ticker lag alone guards
	}
	return w.sample[0].Value.Float64Histogram()
}

// runQueueWorst is the lower edge of the highest run-queue latency bucket
// that grew since the last call (0 if none did).
func (w *schedWatch) runQueueWorst() time.Duration {
	metrics.Read(w.sample)
	h := w.histogram()
	if h == nil {
		return 0
	}
	if len(w.prev) != len(h.Counts) {
		w.prev = make([]uint64, len(h.Counts))
	}
	var worst time.Duration
	for i := len(h.Counts) - 1; i >= 0; i-- {
		if h.Counts[i] > w.prev[i] {
			// Bucket i spans [Buckets[i], Buckets[i+1]): take its
			// lower edge, the delay it proves.
			if lo := h.Buckets[i]; !math.IsInf(lo, 0) && lo > 0 {
				worst = time.Duration(lo * float64(time.Second))
			}
			break
		}
	}
	copy(w.prev, h.Counts)
	return worst
}

// observe records the ticker lag beyond its period and the scheduler's
// worst run-queue latency since the last call, and returns the worst local
// delay within the window.
func (w *schedWatch) observe(now time.Time, tickerLag time.Duration) time.Duration {
	worst := max(tickerLag, 0)
	if w.runQueue {
		worst = max(worst, w.runQueueWorst())
	}
	if worst > 0 {
		w.recent = append(w.recent, stamped{now, worst})
	}
	drop := 0
	for drop < len(w.recent) && now.Sub(w.recent[drop].at) > w.window {
		drop++
	}
	w.recent = append(w.recent[:0], w.recent[drop:]...)
	d := time.Duration(0)
	for _, s := range w.recent {
		d = max(d, s.delay)
	}
	return d
}
