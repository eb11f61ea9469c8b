package proxy

// Review s44. DEMONSTRATED A DEFECT (failed before 2026-12-07): a pass (no-store) answer
// in zstd, decoded as it streams for a client that does not take zstd,
// has its decoder charged from the first 32 bytes only (codeStream ->
// coding.DecoderBytesFor). The 8 MiB-window stream the budget refuses
// (503) is let through when a tiny 1 KiB-window frame is put in front of
// it: the decoder then holds ~8.5 MiB (measured in
// coding/review_s44_zstdframes_test.go) against a ~0.5 MiB charge, per
// concurrent stream.

import (
	"bytes"
	"net/http"
	"testing"

	"github.com/klauspost/compress/zstd"
)

func s44Frames(t *testing.T) (small, big []byte, plain []byte) {
	small = []byte{0x28, 0xb5, 0x2f, 0xfd, 0x00, 0x00}
	h := uint32(40)<<3 | 1
	small = append(small, byte(h), byte(h>>8), byte(h>>16))
	small = append(small, bytes.Repeat([]byte{'a'}, 40)...)
	// Mostly one byte with a page every 4 MiB: the frame stays under the
	// 64 KiB a pass reads whole (its upstream slot then given back), and
	// the decoder's history still fills its 8 MiB window.
	plain = bytes.Repeat([]byte{'a'}, 16<<20)
	for i := 0; i < len(plain); i += 4 << 20 {
		copy(plain[i:], page(1000))
	}
	enc, err := zstd.NewWriter(nil, zstd.WithWindowSize(8<<20), zstd.WithSingleSegment(false), zstd.WithEncoderConcurrency(1))
	if err != nil {
		t.Fatal(err)
	}
	defer enc.Close()
	return small, enc.EncodeAll(plain, nil), plain
}

func TestS44ZstdPassLaterFrameWindowEscapesTheBudget(t *testing.T) {
	small, big, plain := s44Frames(t)
	p := newTestProxy(t, func(c *Config) {
		withCompression(c)
		c.MaxBufferedBytes = 1 << 20 // below the 8 MiB window: a decoder for it must be refused
	})
	hdr := map[string]string{"Cache-Control": "no-store", "Content-Type": "text/html", "Content-Encoding": "zstd"}
	p.origin.set(originResp{header: hdr, body: string(big)})
	if w := p.do("GET", "/z1", map[string]string{"Accept-Encoding": "gzip"}); w.Code != http.StatusServiceUnavailable {
		t.Fatalf("control: the 8 MiB-window stream alone got %d, want 503 (budget refuses its decoder)", w.Code)
	}
	p.origin.set(originResp{header: hdr, body: string(small) + string(big)})
	w := p.do("GET", "/z2", map[string]string{"Accept-Encoding": "gzip"})
	t.Logf("body %d bytes (read whole: %v)", len(small)+len(big), len(small)+len(big) <= spoolWindow)
	t.Logf("1 KiB frame + 8 MiB frame: %d, %d bytes, Content-Encoding %q", w.Code, w.Body.Len(), w.Header().Get("Content-Encoding"))
	if w.Code == 200 && w.Body.Len() == 40+len(plain) {
		t.Errorf("the same 8 MiB-window frame behind a 49-byte 1 KiB-window frame was decoded under a 1 MiB budget: its window was never charged")
	}
	if p.h.Buffered() != 0 {
		t.Errorf("Buffered %d after the responses", p.h.Buffered())
	}
}
