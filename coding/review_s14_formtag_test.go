package coding

import (
	"bytes"
	"math/rand/v2"
	"testing"
)

// TestS14FormBytesDoNotDependOnPooledCoderHistory: a stored form's strong
// tag names its bytes by coding and level alone (FormTag), which needs
// the same input at one level to give the same bytes whatever the pooled
// coder encoded before (another page, larger or smaller, incompressible
// or not) and whether the codec is fresh, as on another node. Each
// coding's form of one body is compared across a fresh codec, a codec
// whose pooled writers encoded other bodies in between, and concurrent
// use. HOLDS.
func TestS14FormBytesDoNotDependOnPooledCoderHistory(t *testing.T) {
	body := formTestBody()[:40<<10]
	rng := rand.New(rand.NewPCG(1, 2))
	noise := make([]byte, 300<<10)
	for i := range noise {
		noise[i] = byte(rng.Uint32())
	}
	small := []byte("<p>tiny</p>")
	for _, enc := range []Encoding{Br, Gzip, Zstd} {
		fresh, _ := NewCodec(DefaultLevels)
		want, err := fresh.EncodeCharged(enc, body, unlimited{})
		if err != nil {
			t.Fatal(err)
		}
		used, _ := NewCodec(DefaultLevels)
		for _, other := range [][]byte{noise, small, append(append([]byte{}, body...), body...), noise[:1000]} {
			if _, err := used.EncodeCharged(enc, other, unlimited{}); err != nil {
				t.Fatal(err)
			}
			got, _ := used.EncodeCharged(enc, body, unlimited{})
			if !bytes.Equal(got, want) {
				t.Fatalf("%v: after the pooled coder encoded a %d-byte body, the same page encodes to other bytes (%d vs %d) under one tag %q",
					enc, len(other), len(got), len(want), used.FormTag(enc))
			}
		}
		// Live writers of the same codec (a node without a stream codec)
		// share the pool: a stream that was flushed midway and abandoned.
		w, _ := used.NewWriter(enc, &bytes.Buffer{})
		_, _ = w.Write(noise[:5000])
		_ = w.Flush()
		_ = w.Close()
		got, _ := used.EncodeCharged(enc, body, unlimited{})
		if !bytes.Equal(got, want) {
			t.Fatalf("%v: after a flushed stream on the pooled coder, the form's bytes changed", enc)
		}
	}
}
