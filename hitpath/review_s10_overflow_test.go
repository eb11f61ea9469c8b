package hitpath

import (
	"maps"
	"slices"
	"strings"
	"testing"
)

// TestS10HandedRequestWithBufferFullOfPipelinedBytes: while net/http
// serves a slow handed request, the client pipelines more than the loop's
// 4 KiB buffer (hold gives the connection to net/http for good); and heads
// of exactly 4096 bytes, one byte more, and one straddling the buffer after
// hits. Answers must match net/http alone.
func TestS10HandedRequestWithBufferFullOfPipelinedBytes(t *testing.T) {
	plain := s10Server(t, false, Config{})
	loop := s10Server(t, true, Config{})
	hit := "GET /hit HTTP/1.1\r\nHost: h\r\n\r\n"
	pad := func(n int) string { // a hit head of exactly n bytes
		base := "GET /hit HTTP/1.1\r\nHost: h\r\nX-Pad: \r\n\r\n"
		return strings.Replace(base, "X-Pad: ", "X-Pad: "+strings.Repeat("p", n-len(base)), 1)
	}
	cases := map[string]string{
		"slow then 9k":       hit + "GET /slow HTTP/1.1\r\nHost: h\r\n\r\n" + pad(3000) + pad(3000) + pad(3000) + "GET /x HTTP/1.1\r\nHost: h\r\n\r\n" + hit,
		"exactly 4096":       pad(4096) + hit + "GET /x HTTP/1.1\r\nHost: h\r\n\r\n",
		"4097":               pad(4097) + hit,
		"straddle":           hit + hit + pad(4080) + hit + "GET /x HTTP/1.1\r\nHost: h\r\n\r\n",
		"slow then straddle": "GET /slow HTTP/1.1\r\nHost: h\r\n\r\n" + pad(4000) + pad(4096) + hit,
	}
	names := slices.Sorted(maps.Keys(cases))
	s10Each(len(names), func(i int) {
		raw := cases[names[i]]
		want, got := s10Pair(
			func() string { return s10Transcript(t, plain, raw, nil, false) },
			func() string { return s10Transcript(t, loop, raw, nil, false) })
		if got != want {
			t.Errorf("%s:\nnet/http alone: %s\nwith the loop:  %s", names[i], want, got)
		}
	})
}
