// Package coding negotiates and applies HTTP content codings (RFC 9110
// §8.4, §12.5.3): which coding a client accepts, which media types are
// worth compressing, and encoding and bounded decoding of whole bodies and
// streams with brotli, zstd, gzip and deflate.
//
// The codecs are github.com/andybalholm/brotli and
// github.com/klauspost/compress; nothing here implements a compression
// format. What is hand-written is the Accept-Encoding negotiation (a few
// dozen lines no maintained library offers with RFC 9110's q-value rules
// and a fixed server preference) and pooling of the encoders, whose state
// is large (a brotli writer at level 5 holds about 1 MiB; zstd more).
package coding

import (
	"strings"
)

// Encoding is a content coding this package knows. Identity is the zero value.
type Encoding uint8

// The codings. Br, Zstd and Gzip are produced; Deflate is only decoded
// (browsers accept it, but its two incompatible framings in the wild make
// it a poor choice to send).
const (
	Identity Encoding = iota
	Br
	Zstd
	Gzip
	Deflate
	// Count is the number of codings, for arrays indexed by Encoding.
	Count
)

var names = [Count]string{"identity", "br", "zstd", "gzip", "deflate"}

// String returns the coding's token as it appears in Content-Encoding.
func (e Encoding) String() string {
	if e < Count {
		return names[e]
	}
	return "unknown"
}

// Parse returns the coding a token names (case-insensitive; x-gzip is gzip,
// RFC 9110 §8.4.1.3). ok is false for a coding this package does not know.
func Parse(token string) (Encoding, bool) {
	token = strings.TrimSpace(token)
	switch {
	case strings.EqualFold(token, "gzip"), strings.EqualFold(token, "x-gzip"):
		return Gzip, true
	case strings.EqualFold(token, "br"):
		return Br, true
	case strings.EqualFold(token, "zstd"):
		return Zstd, true
	case strings.EqualFold(token, "deflate"):
		return Deflate, true
	case strings.EqualFold(token, "identity"), token == "":
		return Identity, true
	}
	return Identity, false
}

// OfBody returns the coding of a body from its Content-Encoding field
// values. ok is false when the body has several codings applied or one this
// package cannot decode: such a body can only be passed on as it is.
func OfBody(contentEncoding []string) (Encoding, bool) {
	enc := Identity
	n := 0
	for _, v := range contentEncoding {
		for tok := range strings.SplitSeq(v, ",") {
			if strings.TrimSpace(tok) == "" {
				continue
			}
			e, ok := Parse(tok)
			if !ok {
				return Identity, false
			}
			if e == Identity {
				continue
			}
			enc = e
			n++
		}
	}
	if n > 1 {
		return Identity, false
	}
	return enc, true
}

// Set is a set of codings.
type Set uint8

// Has reports whether e is in the set.
func (s Set) Has(e Encoding) bool { return s&(1<<e) != 0 }

// With returns the set with e added.
func (s Set) With(e Encoding) Set { return s | 1<<e }

// ParseSet parses a list of coding names (br, zstd, gzip); identity is
// always in the set. It returns the first unknown or unproducible name.
func ParseSet(list []string) (Set, string) {
	s := Set(0).With(Identity)
	for _, n := range list {
		e, ok := Parse(n)
		if !ok || e == Deflate {
			return 0, n
		}
		s = s.With(e)
	}
	return s, ""
}
