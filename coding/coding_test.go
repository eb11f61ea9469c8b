package coding

import (
	"bytes"
	"compress/gzip"
	"errors"
	"io"
	"strings"
	"testing"
)

func TestNegotiate(t *testing.T) {
	all := Set(0).With(Identity).With(Br).With(Zstd).With(Gzip)
	gzipOnly := Set(0).With(Identity).With(Gzip)
	for _, tc := range []struct {
		ae      []string
		offered Set
		want    Encoding
	}{
		{nil, all, Identity},
		{[]string{""}, all, Identity},
		{[]string{"gzip, deflate, br, zstd"}, all, Br},            // Chromium: equal q, br preferred
		{[]string{"gzip, deflate, br, zstd"}, gzipOnly, Gzip},     // only what is offered
		{[]string{"zstd, gzip"}, all, Zstd},                       // no br: zstd before gzip
		{[]string{"gzip;q=1.0, br;q=0.5"}, all, Gzip},             // q decides before preference
		{[]string{"br;q=0, gzip"}, all, Gzip},                     // q=0 excludes
		{[]string{"identity"}, all, Identity},                     // only identity
		{[]string{"identity;q=1, gzip;q=0.5"}, all, Identity},     // identity preferred by q
		{[]string{"*"}, all, Br},                                  // any: our preference
		{[]string{"*;q=0"}, all, Identity},                        // nothing acceptable: identity anyway
		{[]string{"*;q=0.3, gzip;q=0.2"}, all, Br},                // * covers unlisted codings
		{[]string{"GZIP"}, all, Gzip},                             // case-insensitive
		{[]string{"x-gzip"}, all, Gzip},                           // alias
		{[]string{"gzip", "br"}, all, Br},                         // several lines are one list
		{[]string{"br;q=2, gzip"}, all, Gzip},                     // malformed q: member ignored
		{[]string{"br;q=0.5555, gzip;q=0.5"}, all, Gzip},          // four decimals: malformed
		{[]string{"br;q=1.001"}, all, Identity},                   // above 1: malformed
		{[]string{"br;level=5;q=0.9, gzip;q=0.8"}, all, Br},       // other parameters ignored
		{[]string{"br;q=, gzip"}, all, Gzip},                      // empty weight: malformed
		{[]string{" , ,br , "}, all, Br},                          // empty members
		{[]string{"compress, sdch"}, all, Identity},               // unknown codings
		{[]string{"gzip;q=0.001, identity;q=0"}, all, Gzip},       // smallest positive weight
		{[]string{"deflate"}, all, Identity},                      // deflate is not produced
		{[]string{"deflate"}, all.With(Deflate), Deflate},         // unless offered (a stored deflate body)
		{[]string{"gzip;q=0.5, gzip;q=0.9, br;q=0.8"}, all, Gzip}, // repeated member: the highest weight
	} {
		if got := Negotiate(tc.ae, tc.offered); got != tc.want {
			t.Errorf("Negotiate(%q) = %s, want %s", tc.ae, got, tc.want)
		}
	}
}

func TestOfBody(t *testing.T) {
	for _, tc := range []struct {
		ce   []string
		want Encoding
		ok   bool
	}{
		{nil, Identity, true},
		{[]string{"gzip"}, Gzip, true},
		{[]string{"x-gzip"}, Gzip, true},
		{[]string{" BR "}, Br, true},
		{[]string{"identity"}, Identity, true},
		{[]string{"gzip, br"}, Identity, false}, // two codings: passed on as is
		{[]string{"gzip", "gzip"}, Identity, false},
		{[]string{"compress"}, Identity, false},
		{[]string{"aes128gcm"}, Identity, false},
	} {
		got, ok := OfBody(tc.ce)
		if got != tc.want || ok != tc.ok {
			t.Errorf("OfBody(%q) = %s,%v; want %s,%v", tc.ce, got, ok, tc.want, tc.ok)
		}
	}
}

func TestTypes(t *testing.T) {
	ty, bad := NewTypes(DefaultTypes)
	if bad != "" {
		t.Fatalf("default types: %q", bad)
	}
	for ct, want := range map[string]bool{
		"text/html; charset=utf-8": true, "TEXT/CSS": true, "application/javascript": true,
		"application/vnd.api+json": true, "image/svg+xml": true, "application/wasm": true,
		"image/png": false, "video/mp4": false, "": false, "application/octet-stream": false,
		"font/woff2": false, "textual/html": false, ";charset=utf-8": false,
	} {
		if got := ty.Match(ct); got != want {
			t.Errorf("Match(%q) = %v, want %v", ct, got, want)
		}
	}
	for _, bad := range []string{"text", "*/*", "text/*/x", "+", "/json", "text/ html", "a/b;c", "*"} {
		if _, got := NewTypes([]string{bad}); got != bad {
			t.Errorf("NewTypes(%q) accepted a malformed entry", bad)
		}
	}
}

func TestParseSet(t *testing.T) {
	s, bad := ParseSet([]string{"br", "gzip"})
	if bad != "" || !s.Has(Br) || !s.Has(Gzip) || s.Has(Zstd) || !s.Has(Identity) {
		t.Fatalf("ParseSet: %b %q", s, bad)
	}
	for _, b := range []string{"deflate", "lzma", "compress"} {
		if _, got := ParseSet([]string{"br", b}); got != b {
			t.Errorf("ParseSet accepted %q", b)
		}
	}
}

func TestLevelsValidate(t *testing.T) {
	if err := DefaultLevels.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, l := range []Levels{{Br: 12, Zstd: 3, Gzip: 6}, {Br: -1, Zstd: 3, Gzip: 6}, {Br: 5, Zstd: 0, Gzip: 6}, {Br: 5, Zstd: 23, Gzip: 6}, {Br: 5, Zstd: 3, Gzip: 0}, {Br: 5, Zstd: 3, Gzip: 10}} {
		if l.Validate() == nil {
			t.Errorf("%+v accepted", l)
		}
	}
}

func text(n int) []byte {
	var b bytes.Buffer
	for i := 0; b.Len() < n; i++ {
		b.WriteString("<p class=\"item\">The quick brown fox jumps over the lazy dog ")
		b.WriteString(strings.Repeat("x", i%17))
		b.WriteString("</p>\n")
	}
	return b.Bytes()[:n]
}

func TestRoundTrip(t *testing.T) {
	c, err := NewCodec(DefaultLevels)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{0, 1, 1000, 300 << 10} {
		body := text(n)
		for _, e := range []Encoding{Br, Zstd, Gzip} {
			for range 2 { // the second round uses pooled coders
				enc, err := c.Encode(e, body)
				if err != nil {
					t.Fatal(err)
				}
				if n >= 1000 && len(enc) >= len(body)/2 {
					t.Errorf("%s of %d text bytes is %d bytes", e, n, len(enc))
				}
				dec, err := c.Decode(e, enc, int64(n))
				if err != nil || !bytes.Equal(dec, body) {
					t.Fatalf("%s round trip of %d bytes: %v", e, n, err)
				}
			}
		}
	}
}

// TestStreamFlush checks that a flushed prefix decodes before the stream
// ends: a streamed response must reach the client as the origin sends it.
func TestStreamFlush(t *testing.T) {
	c, _ := NewCodec(DefaultLevels)
	for _, e := range []Encoding{Br, Zstd, Gzip} {
		var out bytes.Buffer
		w, err := c.NewWriter(e, &out)
		if err != nil {
			t.Fatal(err)
		}
		first := text(5000)
		_, _ = w.Write(first)
		if err := w.Flush(); err != nil {
			t.Fatal(err)
		}
		r, _ := c.NewReader(e, bytes.NewReader(out.Bytes()), 1<<20)
		got := make([]byte, len(first))
		if _, err := io.ReadFull(r, got); err != nil || !bytes.Equal(got, first) {
			t.Errorf("%s: flushed prefix does not decode: %v", e, err)
		}
		r.Close()
		_ = w.Close()
		_ = w.Close() // a second Close is harmless
	}
}

func TestDecodeBomb(t *testing.T) {
	c, _ := NewCodec(DefaultLevels)
	zeros := make([]byte, 8<<20)
	for _, e := range []Encoding{Br, Zstd, Gzip} {
		bomb, _ := c.Encode(e, zeros)
		if _, err := c.Decode(e, bomb, 1<<20); !errors.Is(err, ErrTooLarge) {
			t.Errorf("%s bomb (%d bytes → 8 MiB) under a 1 MiB limit: %v", e, len(bomb), err)
		}
		if out, err := c.Decode(e, bomb, 8<<20); err != nil || len(out) != 8<<20 {
			t.Errorf("%s: exactly the limit must decode: %v", e, err)
		}
	}
}

func TestDecodeDeflateBothFramings(t *testing.T) {
	c, _ := NewCodec(DefaultLevels)
	body := text(4000)
	var zl, raw bytes.Buffer
	zw := newZlib(&zl)
	_, _ = zw.Write(body)
	_ = zw.Close()
	fw := newRawFlate(&raw)
	_, _ = fw.Write(body)
	_ = fw.Close()
	for name, enc := range map[string][]byte{"zlib": zl.Bytes(), "raw": raw.Bytes()} {
		if got, err := c.Decode(Deflate, enc, 1<<20); err != nil || !bytes.Equal(got, body) {
			t.Errorf("deflate (%s): %v", name, err)
		}
	}
}

// TestDecodeMalformed feeds garbage and truncated streams to every decoder:
// each must fail with an error, never hang or panic.
func TestDecodeMalformed(t *testing.T) {
	c, _ := NewCodec(DefaultLevels)
	var gz bytes.Buffer
	w := gzip.NewWriter(&gz)
	_, _ = w.Write(text(10000))
	_ = w.Close()
	br, _ := c.Encode(Br, text(10000))
	zs, _ := c.Encode(Zstd, text(10000))
	for _, tc := range []struct {
		e    Encoding
		body []byte
	}{
		{Gzip, []byte("not gzip at all")}, {Gzip, gz.Bytes()[:gz.Len()/2]}, {Gzip, nil},
		{Br, []byte{0xff, 0xff, 0xff, 0xff}}, {Br, br[:len(br)/2]},
		{Zstd, []byte("\x28\xb5\x2f\xfdjunk")}, {Zstd, zs[:len(zs)/2]}, {Zstd, []byte("plain")},
		{Deflate, []byte{0x78, 0x9c, 0xff, 0xff}}, {Deflate, nil},
	} {
		if _, err := c.Decode(tc.e, tc.body, 1<<20); err == nil {
			t.Errorf("%s: %d malformed bytes decoded without an error", tc.e, len(tc.body))
		}
	}
}

func FuzzNegotiate(f *testing.F) {
	for _, s := range []string{"gzip, deflate, br, zstd", "br;q=0.5, *;q=0", "identity;q=0", "gzip;q=1.000"} {
		f.Add(s)
	}
	all := Set(0).With(Identity).With(Br).With(Zstd).With(Gzip)
	f.Fuzz(func(t *testing.T, ae string) {
		got := Negotiate([]string{ae}, all)
		if got >= Count || got == Deflate {
			t.Fatalf("Negotiate(%q) = %d, not an offered coding", ae, got)
		}
	})
}

func FuzzDecode(f *testing.F) {
	c, _ := NewCodec(DefaultLevels)
	for _, e := range []Encoding{Br, Zstd, Gzip} {
		b, _ := c.Encode(e, text(2000))
		f.Add(uint8(e), b)
	}
	f.Fuzz(func(t *testing.T, e uint8, body []byte) {
		enc := Encoding(e % uint8(Count))
		out, err := c.Decode(enc, body, 64<<10)
		if err == nil && len(out) > 64<<10 {
			t.Fatalf("%s decoded %d bytes past a 64 KiB limit", enc, len(out))
		}
	})
}

// TestNegotiateStreamPrefersTheCheapestCoder: the same q-values decide as
// for Negotiate; only ties go to zstd, gzip, br (the cheapest output per
// CPU at the stream levels) instead of br, zstd, gzip.
func TestNegotiateStreamPrefersTheCheapestCoder(t *testing.T) {
	all := Set(0).With(Br).With(Zstd).With(Gzip).With(Identity)
	for _, tc := range []struct {
		ae             string
		stored, stream Encoding
	}{
		{"gzip, deflate, br, zstd", Br, Zstd}, // Chromium, Firefox
		{"gzip, deflate, br", Br, Gzip},       // Safari
		{"br", Br, Br},
		{"br;q=1, zstd;q=0.5", Br, Br}, // q decides
		{"zstd;q=0.1, gzip;q=0.1, br;q=0.1", Br, Zstd},
		{"identity", Identity, Identity},
		{"", Identity, Identity},
		{"*", Br, Zstd},
		{"br;q=0, gzip;q=0, zstd;q=0", Identity, Identity},
	} {
		var ae []string
		if tc.ae != "" {
			ae = []string{tc.ae}
		}
		if got := Negotiate(ae, all); got != tc.stored {
			t.Errorf("Negotiate(%q) = %v, want %v", tc.ae, got, tc.stored)
		}
		if got := NegotiateStream(ae, all); got != tc.stream {
			t.Errorf("NegotiateStream(%q) = %v, want %v", tc.ae, got, tc.stream)
		}
	}
}
