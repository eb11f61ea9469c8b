package proxy

import (
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

type sleepWriter struct {
	*httptest.ResponseRecorder
	d    time.Duration
	stop chan struct{}
}

func (s *sleepWriter) Write(p []byte) (int, error) {
	select {
	case <-time.After(s.d):
	case <-s.stop:
		return 0, http.ErrAbortHandler
	}
	return len(p), nil
}

// After a fill turns "too-large" at MaxObjectBytes, slow readers each pin a
// different ~8 MiB generation of the buffer (compactLocked copies the whole
// remainder on every advance of the slowest reader), while Buffered() shows one.
func TestTrimTransitionPinsGenerations(t *testing.T) {
	h, _ := handlerProxy(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "public, max-age=60")
		chunk := strings.Repeat("x", 64<<10)
		for i := 0; i < 256; i++ { // 16 MiB chunked, fast
			if _, err := w.Write([]byte(chunk)); err != nil {
				return
			}
		}
	}, nil) // defaults: MaxObjectBytes 8 MiB, MaxBufferedBytes 64 MiB
	stop := make(chan struct{})
	var wg sync.WaitGroup
	runtime.GC()
	var m0 runtime.MemStats
	runtime.ReadMemStats(&m0)
	const n = 20
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { recover() }()
			h.ServeHTTP(&sleepWriter{httptest.NewRecorder(), time.Duration(100+10*i) * time.Millisecond, stop}, httptest.NewRequest("GET", "http://example.com/big", nil))
		}()
	}
	var peak uint64
	var peakBuf int64
	for i := 0; i < 30; i++ {
		time.Sleep(100 * time.Millisecond)
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		if m.HeapInuse > peak {
			peak = m.HeapInuse
		}
		peakBuf = max(peakBuf, h.Buffered())
	}
	var m1 runtime.MemStats
	runtime.ReadMemStats(&m1)
	grown := int64(peak) - int64(m0.HeapInuse)
	t.Logf("%d slow readers of one too-large fill: peak heap growth %.0f MiB after GC; Buffered peak %.1f MiB; total allocated %.0f MiB",
		n, float64(grown)/(1<<20), float64(peakBuf)/(1<<20), float64(m1.TotalAlloc-m0.TotalAlloc)/(1<<20))
	// One trimmed window shared by every reader (8 MiB, charged), not a
	// generation of the buffer per reader (20 × 8 MiB before the fix).
	if peakBuf > 16<<20 {
		t.Errorf("Buffered peaked at %d MiB for one too-large fill", peakBuf>>20)
	}
	if grown > 48<<20 {
		t.Errorf("%d slow readers of one too-large fill grew the heap by %d MiB", n, grown>>20)
	}
	close(stop)
	wg.Wait()
	h.Wait()
}
