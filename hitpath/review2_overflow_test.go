package hitpath

import (
	"strings"
	"testing"
)

// Around maxKeptFields, with a Host placed before, between and after the
// filler lines and every kind of last line: keeping fields never changes
// whether the connection is net/http's for good, nor the head's length,
// and past the limit nothing is answerable.
func TestReview2OverflowBoundary(t *testing.T) {
	rules := &fieldRules{keep: true, own: []string{"cache-control", "x-forwarded-proto"}, strip: []string{"accept-encoding"}}
	lasts := []string{"X-Z: 1", "Cache-Control: only-if-cached", "X-Forwarded-Proto: https", "Host: h", "Connection: close",
		"Connection: upgrade", "Content-Length: 0", "Transfer-Encoding: chunked", "Expect: 100-continue", "Upgrade: h2c",
		"Accept-Encoding: gzip", "X-Requested-With: k", "Te: trailers", "Keep-Alive: 5", "Bad Name: x"}
	for n := maxKeptFields - 2; n <= maxKeptFields+2; n++ {
		for hostAt := 0; hostAt <= n; hostAt += max(1, n/2) {
			for _, last := range lasts {
				var b strings.Builder
				b.WriteString("GET /p HTTP/1.1\r\n")
				for i := 0; i < n; i++ {
					if i == hostAt {
						b.WriteString("Host: h\r\n")
					}
					b.WriteString("X-F: 1\r\n")
				}
				if hostAt == n {
					b.WriteString("Host: h\r\n")
				}
				b.WriteString(last + "\r\n\r\n")
				head := []byte(b.String())
				var kept, plain Request
				nk, rk, _ := parse(head, &kept, rules)
				np, rp, _ := parse(head, &plain, &fieldRules{strip: rules.strip})
				if (rk == foreign) != (rp == foreign) || (rp != foreign && nk != np) {
					t.Errorf("n=%d host@%d last %q: kept %v/%d, plain %v/%d", n, hostAt, last, rk, nk, rp, np)
				}
				if rk == answerable && n+1 > maxKeptFields {
					t.Errorf("n=%d last %q: answerable with %d fields", n, last, len(kept.Fields))
				}
				if rk == answerable && len(kept.Fields) > maxKeptFields {
					t.Errorf("kept %d fields", len(kept.Fields))
				}
			}
		}
	}
}
