package coding

// Review s44. PINS A PROPERTY (expected to hold): a streaming decoder
// (NewReader over a reader that is not a ByteReader, as proxy.codeStream
// passes an io.MultiReader) holds no more live heap than DecoderBytesFor
// charges from the stream's first 32 bytes, for brotli at small and
// large declared windows, zstd single-frame, gzip (multistream) and
// deflate.

import (
	"bytes"
	"compress/flate"
	"io"
	"runtime"
	"testing"

	"github.com/andybalholm/brotli"
	"github.com/klauspost/compress/zstd"
)

func liveDecoding(t *testing.T, e Encoding, body []byte, stopAt int64) int64 {
	c, _ := NewCodec(DefaultLevels)
	var before, during runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&before)
	r, err := c.NewReader(e, io.MultiReader(bytes.NewReader(body)), 64<<20)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.CopyN(io.Discard, r, stopAt); err != nil {
		t.Fatal(err)
	}
	runtime.GC()
	runtime.ReadMemStats(&during)
	runtime.KeepAlive(r)
	r.Close()
	return int64(during.HeapAlloc) - int64(before.HeapAlloc)
}

func TestS44StreamDecodersStayWithinTheirCharge(t *testing.T) {
	plain := textBody(12 << 20)
	cases := map[string]struct {
		e    Encoding
		body []byte
	}{}
	for _, lg := range []int{10, 16, 18, 24} {
		var b bytes.Buffer
		w := brotli.NewWriterOptions(&b, brotli.WriterOptions{Quality: 4, LGWin: lg})
		w.Write(plain)
		w.Close()
		cases["br lgwin "+string(rune('0'+lg/10))+string(rune('0'+lg%10))] = struct {
			e    Encoding
			body []byte
		}{Br, b.Bytes()}
	}
	for _, win := range []int{1 << 10, 64 << 10, 8 << 20} {
		zw, _ := zstd.NewWriter(nil, zstd.WithWindowSize(max(win, zstd.MinWindowSize)), zstd.WithEncoderConcurrency(1), zstd.WithSingleSegment(false))
		cases["zstd win "+itoa(win)] = struct {
			e    Encoding
			body []byte
		}{Zstd, zw.EncodeAll(plain, nil)}
		zw.Close()
	}
	gz, _ := (&Codec{levels: DefaultLevels}).encodeGzip(plain)
	cases["gzip x3 members"] = struct {
		e    Encoding
		body []byte
	}{Gzip, append(append(append([]byte{}, gz...), gz...), gz...)}
	var fb bytes.Buffer
	fw, _ := flate.NewWriter(&fb, 6)
	fw.Write(plain)
	fw.Close()
	cases["raw deflate"] = struct {
		e    Encoding
		body []byte
	}{Deflate, fb.Bytes()}
	for name, tc := range cases {
		charged := DecoderBytesFor(tc.e, tc.body[:32])
		live := liveDecoding(t, tc.e, tc.body, 10<<20)
		t.Logf("%-16s body %8d: charged %8d, live %8d", name, len(tc.body), charged, live)
		if live > charged+64<<10 {
			t.Errorf("%s: live %d > charged %d", name, live, charged)
		}
	}
}

func itoa(n int) string {
	if n == 0 {
		return "0"
	}
	s := ""
	for ; n > 0; n /= 10 {
		s = string(rune('0'+n%10)) + s
	}
	return s
}

func (c *Codec) encodeGzip(b []byte) ([]byte, error) {
	c2, _ := NewCodec(DefaultLevels)
	return c2.Encode(Gzip, b)
}
