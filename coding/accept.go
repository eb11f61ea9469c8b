package coding

import "strings"

// preference orders codings at equal q-value for a body encoded once
// and kept (a stored form): the smallest output first. Identity comes last,
// so a client that accepts a coding gets it.
var preference = [...]Encoding{Br, Zstd, Gzip, Deflate, Identity}

// streamPreference orders codings at equal q-value for a body encoded as
// it is sent, paid per response, at DefaultStreamLevels: the cheapest
// output per CPU first (docs/benchmarks.md: zstd 1 is 8.8 ms/MiB at 0.34
// of the input, gzip 1 9.6 ms/MiB at 0.36, brotli 1 19 ms/MiB at 0.34).
var streamPreference = [...]Encoding{Zstd, Gzip, Br, Deflate, Identity}

// Negotiate picks the coding of a response from the request's
// Accept-Encoding field values (RFC 9110 §12.5.3) among offered (identity
// is always available). The highest q-value wins; ties go to br, zstd,
// gzip, deflate, then identity. With no Accept-Encoding field the answer is
// identity: any coding would be allowed, but a client that sends no field
// (curl, scripts) rarely decodes one. A member with a malformed q-value is
// ignored. If nothing acceptable is offered, identity is returned too: RFC
// 9110 lets a server send it rather than 406.
func Negotiate(acceptEncoding []string, offered Set) Encoding {
	return negotiate(acceptEncoding, offered, preference[:])
}

// NegotiateStream is Negotiate for a body encoded as it is sent: the same
// q-values decide, and ties go to the cheapest coder (zstd, gzip, br).
func NegotiateStream(acceptEncoding []string, offered Set) Encoding {
	return negotiate(acceptEncoding, offered, streamPreference[:])
}

func negotiate(acceptEncoding []string, offered Set, order []Encoding) Encoding {
	if len(acceptEncoding) == 0 {
		return Identity
	}
	var q [Count]int // q-value × 1000; -1: not mentioned
	for i := range q {
		q[i] = -1
	}
	star := -1
	for _, line := range acceptEncoding {
		for len(line) > 0 {
			var member string
			if i := strings.IndexByte(line, ','); i >= 0 {
				member, line = line[:i], line[i+1:]
			} else {
				member, line = line, ""
			}
			token, params := member, ""
			if i := strings.IndexByte(member, ';'); i >= 0 {
				token, params = member[:i], member[i+1:]
			}
			token = trimOWS(token)
			if token == "" {
				continue
			}
			qv := 1000
			if params != "" {
				var ok bool
				if qv, ok = parseQ(params); !ok {
					continue
				}
			}
			if token == "*" {
				star = maxQ(star, qv)
				continue
			}
			if e, known := parseToken(token); known {
				q[e] = maxQ(q[e], qv)
			}
		}
	}
	best, bestQ := Identity, -1
	for _, e := range order {
		if !offered.Has(e) && e != Identity {
			continue
		}
		v := q[e]
		if v < 0 {
			switch {
			case star >= 0:
				v = star
			case e == Identity:
				v = 1 // identity is acceptable unless excluded (RFC 9110 §12.5.3)
			default:
				v = 0
			}
		}
		if v > bestQ {
			best, bestQ = e, v
		}
	}
	if bestQ <= 0 {
		return Identity
	}
	return best
}

func maxQ(a, b int) int {
	if b > a {
		return b
	}
	return a
}

// parseQ reads the weight among a member's parameters (RFC 9110 §12.4.2:
// "q=" followed by 0, 0.x{0,3}, 1 or 1.0{0,3}); no weight means 1. Other
// parameters are ignored.
func parseQ(params string) (int, bool) {
	q := 1000
	for p := range strings.SplitSeq(params, ";") {
		name, val, ok := strings.Cut(strings.TrimSpace(p), "=")
		if !ok {
			if strings.TrimSpace(p) == "" {
				continue
			}
			return 0, false
		}
		if !strings.EqualFold(strings.TrimSpace(name), "q") {
			continue
		}
		v, ok := parseWeight(strings.TrimSpace(val))
		if !ok {
			return 0, false
		}
		q = v
	}
	return q, true
}

func parseWeight(s string) (int, bool) {
	if s == "" || len(s) > 5 || (s[0] != '0' && s[0] != '1') {
		return 0, false
	}
	n := int(s[0]-'0') * 1000
	if len(s) == 1 {
		return n, true
	}
	if s[1] != '.' {
		return 0, false
	}
	scale := 100
	for i := 2; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' || (n == 1000 && c != '0') {
			return 0, false
		}
		n += int(c-'0') * scale
		scale /= 10
	}
	return n, true
}

// trimOWS trims spaces and tabs, the optional whitespace around list members.
func trimOWS(s string) string {
	for len(s) > 0 && (s[0] == ' ' || s[0] == '\t') {
		s = s[1:]
	}
	for len(s) > 0 && (s[len(s)-1] == ' ' || s[len(s)-1] == '\t') {
		s = s[:len(s)-1]
	}
	return s
}

// parseToken is Parse for an already trimmed token, comparing the common
// lower-case spellings first (the hit path negotiates on every request).
func parseToken(t string) (Encoding, bool) {
	switch t {
	case "br":
		return Br, true
	case "gzip":
		return Gzip, true
	case "zstd":
		return Zstd, true
	case "deflate":
		return Deflate, true
	case "identity":
		return Identity, true
	}
	return Parse(t)
}
