package coding

// Review s44. PINS A PROPERTY (expected to hold): Negotiate and
// NegotiateStream never panic on hostile Accept-Encoding values (huge
// q-values, NaN, -0, thousands of members, huge tokens); they never pick
// a coding outside the offer, never one the client gave q=0 in every
// member naming it, and they agree on whether the answer is encoded (the
// proxy's needsEncode/needsDecode use one, the stream the other).

import (
	"strings"
	"testing"
	"time"
)

func s44ExplicitlyZero(ae []string, e Encoding) bool {
	seen, allZero := false, true
	for _, line := range ae {
		for _, m := range strings.Split(line, ",") {
			tok, params, _ := strings.Cut(m, ";")
			if t, ok := Parse(trimOWS(tok)); !ok || t != e || trimOWS(tok) == "" {
				continue
			}
			q, ok := 1000, true
			if params != "" {
				q, ok = parseQ(params)
			}
			if !ok {
				continue
			}
			seen = true
			if q != 0 {
				allZero = false
			}
		}
	}
	return seen && allZero
}

func s44Check(t *testing.T, ae []string) {
	all := Set(0).With(Identity).With(Br).With(Zstd).With(Gzip)
	for _, offer := range []Set{all, Set(0).With(Identity).With(Gzip), Set(0).With(Identity).With(Deflate)} {
		a, b := Negotiate(ae, offer), NegotiateStream(ae, offer)
		for _, got := range []Encoding{a, b} {
			if got != Identity && !offer.Has(got) {
				t.Fatalf("%q: %s not offered", ae, got)
			}
			if got != Identity && s44ExplicitlyZero(ae, got) {
				t.Fatalf("%q: picked %s, which it refused with q=0", ae, got)
			}
		}
		if (a == Identity) != (b == Identity) {
			t.Fatalf("%q offer %b: Negotiate %s, NegotiateStream %s", ae, offer, a, b)
		}
	}
}

func TestS44HostileAcceptEncoding(t *testing.T) {
	for _, v := range []string{
		"gzip;q=1e309", "gzip;q=NaN", "gzip;q=-0", "gzip;q=+1", "gzip;q=0x1", "br;q=1.0000", "br;q=.5",
		"gzip;q=", "gzip;q", ";q=1", "*;q=0", "identity;q=0", "identity;q=0, *;q=0", "gzip;Q=0.5, br;q=0.4",
		"gzip;q=0.5;q=0", "GZIP;q=0", "x-gzip;q=0, gzip", "br\t;\tq=0", "br ; q = 0", "\x00br", "br\x00",
		strings.Repeat("a", 1<<20), strings.Repeat("gzip;q=0,", 10000) + "br", strings.Repeat(";", 100000),
		strings.Repeat(",", 100000), "gzip;" + strings.Repeat("x=1;", 50000) + "q=0",
	} {
		s44Check(t, []string{v})
	}
	start := time.Now()
	big := []string{strings.Repeat("gzip;q=0.5, br;q=0.9, zstd, identity;q=0.1, ", 20000)}
	for range 10 {
		Negotiate(big, Set(0).With(Identity).With(Br).With(Gzip).With(Zstd))
	}
	if d := time.Since(start) / 10; d > 200*time.Millisecond {
		t.Errorf("a %d-byte Accept-Encoding takes %v to negotiate", len(big[0]), d)
	}
}

func FuzzS44Negotiate(f *testing.F) {
	f.Add("gzip, deflate, br, zstd", "")
	f.Add("br;q=0, gzip;q=0.001, *;q=0", "identity;q=0")
	f.Fuzz(func(t *testing.T, a, b string) {
		s44Check(t, []string{a, b})
	})
}
