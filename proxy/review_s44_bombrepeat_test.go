package proxy

// Review s44. DEMONSTRATED A DEFECT (failed before 2026-12-07): a stored origin-encoded
// body that is a decompression bomb (a ~33 KB gzip body that decodes past
// compression.max_decoded_bytes) is decoded again, up to the limit, on
// every request of a client that does not take gzip: the failure is not
// remembered with the entry, so each ~100-byte request buys ~32 MiB of
// decompression (answered 502), for as long as the entry is fresh.

import (
	"bytes"
	"compress/gzip"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestS44StoredBombIsDecodedAgainOnEveryRequest(t *testing.T) {
	p := newTestProxy(t, withCompression)
	var b bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&b, gzip.BestCompression)
	zw.Write(make([]byte, 40<<20))
	zw.Close()
	p.origin.set(originResp{header: map[string]string{"Cache-Control": "max-age=600", "Content-Type": "text/html", "Content-Encoding": "gzip"}, body: b.String()})
	if w := p.do("GET", "/bomb", map[string]string{"Accept-Encoding": "gzip"}); w.Code != 200 || w.Body.Len() != b.Len() {
		t.Fatalf("gzip client: %d, %d bytes", w.Code, w.Body.Len())
	}
	const n = 10
	start := time.Now()
	for range n {
		if w := p.do("GET", "/bomb", nil); w.Code != 502 {
			t.Fatalf("identity client: %d", w.Code)
		}
	}
	per := time.Since(start) / n
	bombs := testutil.ToFloat64(p.h.metrics.compression.bombs)
	t.Logf("%d-byte stored gzip body; %d identity requests: %v each, bombs counted %v, origin calls %d", b.Len(), n, per, bombs, p.origin.calls.Load())
	if bombs >= n {
		t.Errorf("the same stored bomb was decoded up to max_decoded_bytes %v times for %d requests (%v of CPU each): the refusal is not remembered", bombs, n, per)
	}
}
