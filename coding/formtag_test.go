package coding

import (
	"crypto/sha256"
	"encoding/hex"
	"testing"
)

type unlimited struct{}

func (unlimited) Charge(int64) bool { return true }
func (unlimited) Release(int64)     {}

// formTestBody is a fixed, compressible input: text from a fixed
// generator, so that the coders have matches to find at every level.
func formTestBody() []byte {
	words := []string{"edge ", "cache ", "origin ", "peer ", "page ", "the ", "a ", "stale ", "fresh ", "<div>", "</div>\n"}
	var b []byte
	x := uint32(1)
	for len(b) < 64<<10 {
		x = x*1664525 + 1013904223
		b = append(b, words[x>>28%uint32(len(words))]...)
	}
	return b
}

// TestFormBytesArePinned: what the stored forms' coders make of a fixed
// body at the default levels. A strong entity-tag of a form names its
// bytes by the coding and level alone (Codec.FormTag), which holds only
// while the same input at the same level makes the same bytes. If this
// fails, a coder's output changed (a library upgrade): change
// formGeneration, so that the new bytes get new tags, then the hashes.
func TestFormBytesArePinned(t *testing.T) {
	c, err := NewCodec(DefaultLevels)
	if err != nil {
		t.Fatal(err)
	}
	body := formTestBody()
	want := map[Encoding]struct{ tag, sum string }{
		Br:   {"br5", "8d91d4371c9dd86e"},
		Zstd: {"zstd3", "617a3fedff826b28"},
		Gzip: {"gzip6", "f371d1bc298e7840"},
	}
	for enc, w := range want {
		if got := c.FormTag(enc); got != w.tag+formGeneration {
			t.Errorf("FormTag(%v) = %q, want %q", enc, got, w.tag+formGeneration)
		}
		out, err := c.EncodeCharged(enc, body, unlimited{})
		if err != nil {
			t.Fatal(err)
		}
		again, _ := c.EncodeCharged(enc, body, unlimited{})
		if string(again) != string(out) {
			t.Errorf("%v: two runs of the same body at one level made different bytes", enc)
		}
		sum := sha256.Sum256(out)
		if got := hex.EncodeToString(sum[:8]); got != w.sum {
			t.Errorf("%v at its default level: bytes %s, pinned %s: the coder's output changed, so change formGeneration (and these hashes)", enc, got, w.sum)
		}
	}
	if got := c.FormTag(Identity); got != "identity" {
		t.Errorf("FormTag(identity) = %q: decoding is exact and needs no level", got)
	}
	other, _ := NewCodec(Levels{Br: 9, Zstd: 3, Gzip: 6})
	if other.FormTag(Br) == c.FormTag(Br) {
		t.Error("two brotli levels share a form tag")
	}
}
