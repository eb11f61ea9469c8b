package proxy

import (
	"net/http/httptest"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
)

// BenchmarkMemoryPerObject fills a store through the handler with 1M small
// objects (64-byte bodies, the demo origin's usual fields) and reports the
// heap per object, and what of it is the response itself (key, header
// fields and body, as Entry.Size counts them) and what is overhead (the
// Entry struct, the index map, the LRU list, parsed directives). Run it
// with -benchtime=1x: one fill is the measurement.
//
//	go test ./proxy/ -run '^$' -bench MemoryPerObject -benchtime=1x
func BenchmarkMemoryPerObject(b *testing.B) {
	objects := memoryObjects()
	p := newTestProxyB(b)
	p.origin.set(originResp{header: map[string]string{
		"Cache-Control": "max-age=3600", "Content-Type": "text/html; charset=utf-8", "ETag": `"0123456789"`,
		"Last-Modified": "Mon, 30 Nov 2026 10:00:00 GMT",
	}, body: strings.Repeat("x", 64)})
	p.h.store.budget = 1 << 40 // bytes are not the limit here: 1M objects are
	w := &discardWriter{h: make(map[string][]string)}
	before := heapAfterGC()
	for b.Loop() {
		for i := range objects {
			w.reset()
			p.h.ServeHTTP(w, httptest.NewRequest("GET", "http://example.com/obj/"+strconv.Itoa(i), nil))
		}
	}
	after := heapAfterGC()
	st := p.h.store.Stats()
	n := st.Objects
	if n != int64(objects) {
		b.Fatalf("stored %d objects, want %d", n, objects)
	}
	payload := st.Bytes // Entry.Size of each: key, header fields, body
	perObject := float64(after-before) / float64(n)
	b.ReportMetric(perObject, "heap-B/object")
	b.ReportMetric(float64(payload)/float64(n), "payload-B/object")
	b.ReportMetric(perObject-float64(payload)/float64(n), "overhead-B/object")
}

func heapAfterGC() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// memoryObjects is the fill size: 1M, or EDGE_MEMORY_OBJECTS.
func memoryObjects() int {
	if n, err := strconv.Atoi(os.Getenv("EDGE_MEMORY_OBJECTS")); err == nil && n > 0 {
		return n
	}
	return 1_000_000
}
