package proxy

import (
	"bytes"
	"compress/gzip"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/andybalholm/brotli"
)

func gzipOf(b []byte) string {
	var gz bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&gz, gzip.BestSpeed)
	_, _ = zw.Write(b)
	_ = zw.Close()
	return gz.String()
}

func brotliOf(b []byte) string {
	var out bytes.Buffer
	bw := brotli.NewWriterLevel(&out, 1) // fast: the tests code tens of MiB under the race detector
	_, _ = bw.Write(b)
	_ = bw.Close()
	return out.String()
}

// A decoded form made for an entry that is not in the store (here: a 304
// turned the response private, so the revalidated entry is this client's
// alone) is released from the buffer budget in form() and "moved" to a
// store that never takes it: 6 MiB of decoded bytes are held by a stalled
// client while neither the buffer budget nor the store counts them.
func TestDecodedFormOfAnUnstoredEntryStaysCharged(t *testing.T) {
	const decodedSize = 6 << 20
	plain := []byte(page(decodedSize))
	p := newTestProxy(t, func(c *Config) {
		withCompression(c)
		c.MaxBufferedBytes = 32 << 20
	})
	hdr := map[string]string{"Cache-Control": "max-age=1", "ETag": `"v1"`, "Content-Type": "text/html", "Content-Encoding": "gzip"}
	p.origin.set(originResp{header: hdr, body: gzipOf(plain)})
	if w := p.do("GET", "/x", map[string]string{"Accept-Encoding": "gzip"}); w.Code != 200 {
		t.Fatalf("fill: %d", w.Code)
	}
	p.clk.Set(t0.Add(10 * time.Second))
	hdr2 := map[string]string{"Cache-Control": "private, max-age=60", "ETag": `"v1"`, "Content-Type": "text/html", "Content-Encoding": "gzip"}
	p.origin.set(originResp{header: hdr2, body: gzipOf(plain)})

	sw := &stalledWriter{hdr: http.Header{}, release: make(chan struct{})}
	done := make(chan struct{})
	go func() {
		defer close(done)
		r := httptest.NewRequest("GET", "http://example.com/x", nil)
		r.Header.Set("Accept-Encoding", "identity")
		p.h.ServeHTTP(sw, r)
	}()
	waitUntil(t, "the client stalled on the decoded body", sw.stalled.Load)
	buffered, stored := p.h.Buffered(), p.h.store.Stats().Bytes
	close(sw.release)
	<-done
	p.h.Wait()
	t.Logf("while a client holds a %d-byte decoded body: buffered=%d store=%d; code=%d n=%d CE=%q", decodedSize, buffered, stored, sw.code, sw.n, sw.hdr.Get("Content-Encoding"))
	if sw.code != 200 || sw.n != decodedSize {
		t.Fatalf("unexpected answer %d, %d bytes", sw.code, sw.n)
	}
	if buffered+stored < decodedSize {
		t.Errorf("%d decoded bytes held by a response are charged nowhere (buffered %d, store %d)", decodedSize, buffered, stored)
	}
	if b := p.h.Buffered(); b != 0 {
		t.Errorf("Buffered %d after all requests", b)
	}
}

// An object the origin stored in brotli: an identity client on an idle
// server with a valid limits.max_buffered_bytes (8 MiB; the config accepts
// ≥1 MiB) is refused with 503 + Retry-After forever, because DecodeCharged
// charges brotli's largest window (16.25 MiB) whatever the body's size.
func TestSmallBrotliObjectDecodesUnderASmallBudget(t *testing.T) {
	plain := []byte(page(100 << 10))
	p := newTestProxy(t, func(c *Config) {
		withCompression(c)
		c.MaxBufferedBytes = 8 << 20
	})
	p.origin.set(originResp{header: map[string]string{"Cache-Control": "max-age=600", "Content-Type": "text/html", "Content-Encoding": "br"}, body: brotliOf(plain)})
	if w := p.do("GET", "/b", map[string]string{"Accept-Encoding": "br"}); w.Code != 200 {
		t.Fatalf("fill: %d", w.Code)
	}
	for i := range 3 {
		w := p.do("GET", "/b", map[string]string{"Accept-Encoding": "gzip"})
		t.Logf("try %d: %d Retry-After=%q Cache-Status=%q buffered=%d", i, w.Code, w.Header().Get("Retry-After"), w.Header().Get("Cache-Status"), p.h.Buffered())
		if w.Code != 200 || w.Body.String() != string(plain) {
			t.Errorf("idle server, 100 KiB page: %d (want 200 with the decoded body)", w.Code)
		}
	}
	// The default budget (64 MiB) with a brotli page decoding to 25 MiB.
	big := []byte(page(25 << 20))
	p2 := newTestProxy(t, withCompression)
	p2.origin.set(originResp{header: map[string]string{"Cache-Control": "max-age=600", "Content-Type": "text/html", "Content-Encoding": "br"}, body: brotliOf(big)})
	if w := p2.do("GET", "/b", map[string]string{"Accept-Encoding": "br"}); w.Code != 200 {
		t.Fatalf("fill: %d", w.Code)
	}
	p2.do("GET", "/b", nil)
	w := p2.do("GET", "/b", map[string]string{"Accept-Encoding": "identity"})
	t.Logf("default budget, 25 MiB decoded: %d buffered=%d", w.Code, p2.h.Buffered())
	if w.Code != 200 {
		t.Errorf("idle server, default config: %d for an identity client of a 25 MiB (decoded, < max_decoded_bytes) brotli page", w.Code)
	}
}

// A pass (uncacheable) brotli response to a client that does not accept
// br, when the decoder's window does not fit: the 503 must not keep the
// origin's Content-Encoding: br (and its ETag) on a plain-text error body
// (from the second hostile review, as the tests below).
func TestStreamRefusalCarriesNoOriginCoding(t *testing.T) {
	plain := []byte(page(100 << 10))
	p := newTestProxy(t, func(c *Config) {
		withCompression(c)
		c.MaxBufferedBytes = 1 << 20 // below the 4 MiB window the stream declares: refused
	})
	p.origin.set(originResp{header: map[string]string{"Cache-Control": "no-store", "ETag": `"v9"`, "Content-Type": "text/html", "Content-Encoding": "br"}, body: brotliOf(plain)})
	w := p.do("GET", "/s", map[string]string{"Accept-Encoding": "gzip"})
	if w.Code != http.StatusServiceUnavailable {
		t.Fatalf("%d: the decoder was not refused, so the refusal's fields are not tested", w.Code)
	}
	if w.Header().Get("Content-Encoding") != "" || w.Header().Get("ETag") != "" {
		t.Errorf("a client that accepts only gzip got Content-Encoding %q on a plain-text %d", w.Header().Get("Content-Encoding"), w.Code)
	}
	if p.h.Buffered() != 0 {
		t.Errorf("Buffered %d", p.h.Buffered())
	}
}

// The same for a disk-tier hit: the entry read back from disk is not in
// the store, so its decoded form is released from the buffer budget and
// charged nowhere while a stalled client reads it.
func TestDecodedFormOfADiskHitStaysCharged(t *testing.T) {
	const decodedSize = 6 << 20
	plain := []byte(page(decodedSize))
	gz := gzipOf(plain)
	h, _, tier, _ := diskProxy(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=600")
		w.Header().Set("Content-Type", "text/html")
		w.Header().Set("Content-Encoding", "gzip")
		_, _ = w.Write([]byte(gz))
	}, func(c *Config) { withCompression(c); c.MaxBufferedBytes = 32 << 20 })
	if r := serveFlushed(t, h, tier, "GET", "/d", "Accept-Encoding", "gzip"); r.code != 200 {
		t.Fatalf("fill: %d", r.code)
	}
	sw := &stalledWriter{hdr: http.Header{}, release: make(chan struct{})}
	done := make(chan struct{})
	go func() {
		defer close(done)
		r := httptest.NewRequest("GET", "http://example.com/d", nil)
		r.Header.Set("Accept-Encoding", "identity")
		h.ServeHTTP(sw, r)
	}()
	waitUntil(t, "the client stalled on the decoded body", sw.stalled.Load)
	buffered, stored := h.Buffered(), h.store.Stats().Bytes
	close(sw.release)
	<-done
	h.Wait()
	t.Logf("disk hit, stalled client of a %d-byte decoded body: buffered=%d (compressed entry %d) store=%d; code=%d n=%d", decodedSize, buffered, len(gz), stored, sw.code, sw.n)
	if sw.code == 200 && buffered+stored < decodedSize {
		t.Errorf("decoded body of a disk hit charged nowhere")
	}
	if b := h.Buffered(); b != 0 {
		t.Errorf("Buffered %d after all requests", b)
	}
}
