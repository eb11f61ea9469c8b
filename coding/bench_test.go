package coding

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

// corpus is 512 KiB of this repository's own text (Go sources, Markdown and
// YAML): the mix of code and prose a site's HTML, CSS and JavaScript is
// closer to than any synthetic text.
func corpus(b *testing.B) []byte {
	b.Helper()
	var buf bytes.Buffer
	for _, pattern := range []string{"../*/*.go", "../*/*/*.go", "../docs/*.md", "../config.yaml", "../*.md"} {
		files, _ := filepath.Glob(pattern)
		for _, f := range files {
			data, err := os.ReadFile(f)
			if err == nil {
				buf.Write(data)
			}
		}
	}
	if buf.Len() < 512<<10 {
		b.Skipf("only %d bytes of corpus", buf.Len())
	}
	return buf.Bytes()[:512<<10]
}

// BenchmarkEncode is the cost per MiB of each coding and level, with the
// ratio it reaches (reported as output bytes per input byte).
func BenchmarkEncode(b *testing.B) {
	in := corpus(b)
	for _, tc := range []struct {
		enc    Encoding
		levels []int
	}{
		{Br, []int{1, 4, 5, 6, 9, 11}},
		{Zstd, []int{1, 3, 7, 19}},
		{Gzip, []int{1, 5, 6, 9}},
	} {
		for _, lvl := range tc.levels {
			l := DefaultLevels
			switch tc.enc {
			case Br:
				l.Br = lvl
			case Zstd:
				l.Zstd = lvl
			case Gzip:
				l.Gzip = lvl
			}
			c, err := NewCodec(l)
			if err != nil {
				b.Fatal(err)
			}
			b.Run(tc.enc.String()+"-"+strconv.Itoa(lvl), func(b *testing.B) {
				b.SetBytes(int64(len(in)))
				b.ReportAllocs()
				var out []byte
				for b.Loop() {
					out, _ = c.Encode(tc.enc, in)
				}
				b.ReportMetric(float64(len(out))/float64(len(in)), "ratio")
			})
		}
	}
}

// BenchmarkDecode is the cost per MiB (of decoded output) of each decoder.
func BenchmarkDecode(b *testing.B) {
	in := corpus(b)
	c, _ := NewCodec(DefaultLevels)
	for _, enc := range []Encoding{Br, Zstd, Gzip} {
		packed, _ := c.Encode(enc, in)
		b.Run(enc.String(), func(b *testing.B) {
			b.SetBytes(int64(len(in)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := c.Decode(enc, packed, 2<<20); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkNegotiate(b *testing.B) {
	ae := []string{"gzip, deflate, br, zstd"}
	all := Set(0).With(Identity).With(Br).With(Zstd).With(Gzip)
	b.ReportAllocs()
	for b.Loop() {
		if Negotiate(ae, all) != Br {
			b.Fatal("not br")
		}
	}
}
