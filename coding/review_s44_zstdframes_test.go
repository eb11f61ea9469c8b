package coding

// Review s44. DEMONSTRATED A DEFECT (failed before 2026-12-07: a stream is charged StreamDecoderBytes now): the charge for a
// streaming zstd decoder (DecoderBytesFor on the first 32 bytes, as
// proxy.codeStream calls it) is taken from the first frame alone; a second
// frame starting past the head declares an 8 MiB window, and the decoder
// then holds ~8 MiB live that nobody charged (docs/operations.md: "a
// decoder streaming one response ... the window its stream declares in its
// first bytes").

import (
	"bytes"
	"testing"

	"github.com/klauspost/compress/zstd"
)

// s44SmallFrame is a whole zstd frame declaring a 1 KiB window, holding one
// raw block of n bytes (n > 32 puts the frame's end past the proxy's head).
func s44SmallFrame(n int) []byte {
	f := []byte{0x28, 0xb5, 0x2f, 0xfd, 0x00, 0x00}
	h := uint32(n)<<3 | 1 // raw, last
	f = append(f, byte(h), byte(h>>8), byte(h>>16))
	return append(f, bytes.Repeat([]byte{'a'}, n)...)
}

func s44BigWindowFrame(t *testing.T, content int) []byte {
	enc, err := zstd.NewWriter(nil, zstd.WithWindowSize(8<<20), zstd.WithSingleSegment(false), zstd.WithEncoderConcurrency(1))
	if err != nil {
		t.Fatal(err)
	}
	defer enc.Close()
	// Text-like, so blocks are compressed (not RLE) and the history fills.
	return enc.EncodeAll(textBody(content), nil)
}

func TestS44ZstdLaterFrameWindowIsCharged(t *testing.T) {
	first := s44SmallFrame(40)
	second := s44BigWindowFrame(t, 16<<20)
	rle := bytes.Repeat([]byte{'a'}, 16<<20)
	for i := 0; i < len(rle); i += 4 << 20 {
		copy(rle[i:], textBody(1000))
	}
	enc, _ := zstd.NewWriter(nil, zstd.WithWindowSize(8<<20), zstd.WithSingleSegment(false), zstd.WithEncoderConcurrency(1))
	small := append(append([]byte{}, first...), enc.EncodeAll(rle, nil)...)
	enc.Close()
	t.Logf("a %d-byte variant (mostly one byte): charged %d, live %d", len(small), StreamDecoderBytes(Zstd, small[:32], false), liveDecoding(t, Zstd, small, 12<<20))
	body := append(append([]byte{}, first...), second...)
	head := body[:32] // what proxy.codeStream reads before charging
	charged := StreamDecoderBytes(Zstd, head, false)
	live := liveDecoding(t, Zstd, body, 12<<20)
	t.Logf("two frames (1 KiB window, then 8 MiB): %d-byte body, charged %d, live %d", len(body), charged, live)
	// Control: the big frame alone is charged what it declares.
	t.Logf("the 8 MiB frame alone: charged %d", DecoderBytesFor(Zstd, second[:32]))
	if live > charged+1<<20 {
		t.Errorf("a %d-byte zstd body holds %d bytes live in its decoder but was charged %d (a later frame's window is never charged)", len(body), live, charged)
	}
}
