package proxy

import (
	"net/http/httptest"
	"testing"

	"github.com/edgecache/edge/coding"
)

// TestNoStoredFormForAnEntryTheStoreDoesNotHold: an entry the store does
// not hold (a disk hit's entry, an evicted or purged one still being
// served) gets no background form at the stored (slowest) level, which
// chargeForm would refuse and makeFormLater throw away on every hit (a
// hostile review found that); its hits are encoded live, and the buffer
// budget comes back whole.
func TestNoStoredFormForAnEntryTheStoreDoesNotHold(t *testing.T) {
	p := newTestProxy(t, withCompression)
	body := page(64 << 10)
	p.origin.set(originResp{header: map[string]string{"Cache-Control": "max-age=60", "Content-Type": "text/html"}, body: body})
	if w := p.do("GET", "/page", map[string]string{"Accept-Encoding": "br"}); w.Code != 200 {
		t.Fatal(w.Code)
	}
	key := p.h.key("http", "example.com", "/page", "")
	e := p.h.store.lookupPlain(key)
	if e == nil {
		t.Fatal("not stored")
	}
	p.h.store.Remove(key) // e is now what a disk hit or an evicted entry is: not the store's
	stored := func() float64 { return counterValue(p.h.metrics.compression.in[opEncode][coding.Br]) }
	before := stored()
	for range 4 {
		r := httptest.NewRequest("GET", "http://example.com/page", nil)
		r.Header.Set("Accept-Encoding", "br")
		w := httptest.NewRecorder()
		p.h.writeEntry(w, r, e, p.clk.Now(), statusHit, nil)
		p.h.Wait()
	}
	if n := (stored() - before) / float64(len(body)); n > 0 {
		t.Fatalf("%v stored-level br encodings of the whole body were made in the background and all thrown away (formSlots busy for nothing)", n)
	}
	if b := p.h.Buffered(); b != 0 {
		t.Fatalf("Buffered %d after the writes", b)
	}
}
