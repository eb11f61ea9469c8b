package coding

// Review s44. PINS A PROPERTY (expected to hold): every strict prefix of a
// coded body fails to decode (never a shorter body with a nil error), in
// every coding, through Decode, DecodeCharged and a stream reader; and a
// pooled decoder that saw a corrupt or truncated stream decodes the next
// body correctly (no poisoned pool).

import (
	"bytes"
	"compress/flate"
	"compress/zlib"
	"io"
	"testing"
)

func s44Coded(t *testing.T, c *Codec, e Encoding, body []byte) []byte {
	switch e {
	case Deflate:
		var b bytes.Buffer
		w, _ := zlib.NewWriterLevel(&b, 6)
		w.Write(body)
		w.Close()
		return b.Bytes()
	case Identity + 100: // raw deflate
		var b bytes.Buffer
		w, _ := flate.NewWriter(&b, 6)
		w.Write(body)
		w.Close()
		return b.Bytes()
	}
	out, err := c.Encode(e, body)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestS44EveryPrefixFailsToDecode(t *testing.T) {
	c, _ := NewCodec(DefaultLevels)
	body := textBody(70 << 10)
	for _, e := range []Encoding{Br, Zstd, Gzip, Deflate, Identity + 100} {
		full := s44Coded(t, c, e, body)
		de := e
		if e == Identity+100 {
			de = Deflate
		}
		if out, err := c.Decode(de, full, 1<<20); err != nil || !bytes.Equal(out, body) {
			t.Fatalf("%v: whole body: %v", e, err)
		}
		for n := 1; n < len(full); n++ { // 0 bytes: the proxy serves an empty body as empty (transcode)
			if n > 64 && n < len(full)-64 && n%97 != 0 {
				continue
			}
			out, err := c.Decode(de, full[:n], 1<<20)
			if err == nil {
				t.Errorf("%v: a %d/%d-byte prefix decoded without error to %d bytes", e, n, len(full), len(out))
				continue
			}
			out, err = c.DecodeCharged(de, full[:n], 1<<20, newBudget(64<<20))
			if err == nil {
				t.Errorf("%v: DecodeCharged of a %d/%d-byte prefix: no error, %d bytes", e, n, len(full), len(out))
			}
			r, err := c.NewReader(de, bytes.NewReader(full[:n]), 1<<20)
			if err == nil {
				_, err = io.Copy(io.Discard, r)
				r.Close()
				if err == nil {
					t.Errorf("%v: stream reader of a %d/%d-byte prefix ended cleanly", e, n, len(full))
				}
			}
		}
		// A corrupt body (a flipped byte in the middle, then one in the
		// trailer), then the pool's next decode must be exact.
		for _, at := range []int{len(full) / 2, len(full) - 2} {
			bad := append([]byte{}, full...)
			bad[at] ^= 0x55
			_, _ = c.Decode(de, bad, 1<<20)
			_, _ = c.Decode(de, full[:len(full)/3], 1<<20)
			if out, err := c.Decode(de, full, 1<<20); err != nil || !bytes.Equal(out, body) {
				t.Errorf("%v: after a corrupt body (byte %d), the next decode: %v", e, at, err)
			}
		}
	}
}

// A corrupt checksum in gzip's and zstd's trailers is detected.
func TestS44BadChecksumIsAnError(t *testing.T) {
	c, _ := NewCodec(DefaultLevels)
	body := textBody(10 << 10)
	for _, e := range []Encoding{Gzip, Deflate} {
		full := s44Coded(t, c, e, body)
		bad := append([]byte{}, full...)
		if e == Gzip {
			bad[len(bad)-8] ^= 1 // CRC32
		} else {
			bad[len(bad)-1] ^= 1 // Adler-32
		}
		if _, err := c.Decode(e, bad, 1<<20); err == nil {
			t.Errorf("%s: a bad checksum decoded without error", e)
		}
	}
}
