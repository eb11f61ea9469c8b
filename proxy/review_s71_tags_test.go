package proxy

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// TestS71SurrogateTagsAreChargedForWhatTheyCost: the store is bounded in
// bytes, and an entry is charged its header bytes (computeSize). But each
// tag of its Surrogate-Key costs far more than its bytes in the header:
// a 16-byte string header in e.surrogates, and an entry in the store's
// tags index (tags[tag][url key], one per tag per entry). An origin that
// tags every page with the same two thousand short tags ("t0000 t0001
// ...", five bytes each) makes an entry charged about 12 KB hold about
// ten times that, so a store held to its budget holds about ten times
// its budget in the heap (a 1 GiB cache: about 10 GiB).
//
// The store here has a 4 MiB budget and is filled well past it (it
// evicts); its heap should stay within a few times the budget. The bound
// expected: count a tag's bookkeeping (say 64 bytes per tag) in
// computeSize, or cap the tags kept per entry.
func TestS71SurrogateTagsAreChargedForWhatTheyCost(t *testing.T) {
	const budget, tags, pages = 4 << 20, 2000, 800
	clk := &clock{now: t0}
	o := newTestOrigin(t, clk)
	var tagList strings.Builder
	for i := range tags {
		fmt.Fprintf(&tagList, "t%04d ", i)
	}
	o.set(originResp{header: map[string]string{"Cache-Control": "max-age=600", "Surrogate-Key": tagList.String()}, body: "x"})
	cfg := DefaultConfig()
	cfg.Now = clk.Now
	store := NewStore(budget, 8)
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	f := &originFetcher{base: o.srv.URL, client: &http.Client{Transport: tr, Timeout: 5 * time.Second}}
	h := New(cfg, store, f, NewMetrics(prometheus.NewRegistry(), store), nil)

	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	for i := range pages {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest("GET", fmt.Sprintf("http://example.com/p/%d", i), nil))
		h.Wait()
		if w.Code != 200 {
			t.Fatalf("page %d: %d", i, w.Code)
		}
	}
	runtime.GC()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	st := store.Stats()
	grew := int64(after.HeapAlloc) - int64(before.HeapAlloc)
	store.mu.Lock()
	index := 0
	for _, m := range store.tags {
		index += len(m)
	}
	store.mu.Unlock()
	t.Logf("store: %d entries, %d bytes charged (budget %d), %d evictions; tag index %d (tag, key) pairs; heap grew %d MiB",
		st.Objects, st.Bytes, budget, st.Evictions, index, grew>>20)
	if st.Evictions == 0 {
		t.Fatal("the store never reached its budget: the scenario did not happen")
	}
	if grew > 3*budget {
		t.Errorf("a store held to %d MiB holds %d MiB of heap: its entries' tags are charged a fraction of what they cost", budget>>20, grew>>20)
	}
	runtime.KeepAlive(h)
}
