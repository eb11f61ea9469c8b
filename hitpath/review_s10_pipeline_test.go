package hitpath

import (
	"io"
	"math/rand"
	"net"
	"strings"
	"testing"
	"time"
)

// s10Pool are request kinds a pipelining client mixes: hits, misses,
// slow misses, bodies of both framings, HEAD, large heads, bad bytes.
var s10Pool = []struct {
	raw    string
	method string
}{
	{"GET /hit HTTP/1.1\r\nHost: h\r\n\r\n", "GET"},
	{"HEAD /hit HTTP/1.1\r\nHost: h\r\n\r\n", "HEAD"},
	{"GET /miss HTTP/1.1\r\nHost: h\r\n\r\n", "GET"},
	{"GET /slow HTTP/1.1\r\nHost: h\r\n\r\n", "GET"},
	{"GET /hit HTTP/1.1\r\nHost: h\r\nRange: bytes=0-0\r\n\r\n", "GET"},
	{"POST /p HTTP/1.1\r\nHost: h\r\nContent-Length: 22\r\n\r\nGET /evil HTTP/1.1\r\n\r\n", "POST"},
	{"POST /c HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nGET /\r\n0\r\n\r\n", "POST"},
	{"GET /hit HTTP/1.1\r\nHost: h\r\nX-Pad: " + strings.Repeat("a", 3000) + "\r\n\r\n", "GET"},
	{"GET /hit HTTP/1.1\r\nHost: h\r\nX-Pad: " + strings.Repeat("b", 4000) + "\r\n\r\n", "GET"},
	{"GET /miss?" + strings.Repeat("q", 2500) + " HTTP/1.1\r\nHost: h\r\n\r\n", "GET"},
}

// TestS10RandomPipelines pipelines random mixes of the pool, written in
// random pieces, to net/http alone and to the loop, and compares the
// answers (statuses and bodies, in order, and whether the server closed).
func TestS10RandomPipelines(t *testing.T) {
	plain := s10Server(t, false, Config{})
	loop := s10Server(t, true, Config{})
	rng := rand.New(rand.NewSource(10))
	type pipeline struct {
		raw     string
		methods []string
		seed    int64
	}
	var ps []pipeline
	for range 60 {
		n := 2 + rng.Intn(8)
		var raw strings.Builder
		var methods []string
		for range n {
			k := s10Pool[rng.Intn(len(s10Pool))]
			raw.WriteString(k.raw)
			methods = append(methods, k.method)
		}
		ps = append(ps, pipeline{raw.String(), methods, rng.Int63()})
	}
	s10Each(len(ps), func(i int) {
		p := ps[i]
		want, got := s10Pair(
			func() string { return s10ChunkedTranscript(t, plain, p.raw, p.methods, p.seed) },
			func() string { return s10ChunkedTranscript(t, loop, p.raw, p.methods, p.seed) })
		if got != want {
			t.Errorf("pipeline %d, methods %v:\n net/http alone: %s\n with the loop:  %s", i, p.methods, want, got)
		}
	})
}

// s10ChunkedTranscript is s10Transcript with raw written in random pieces
// with short pauses.
func s10ChunkedTranscript(t *testing.T, addr, raw string, methods []string, seed int64) string {
	t.Helper()
	w := func(c net.Conn) {
		rng := rand.New(rand.NewSource(seed))
		for len(raw) > 0 {
			k := min(len(raw), 1+rng.Intn(3000))
			if _, err := io.WriteString(c, raw[:k]); err != nil {
				return
			}
			raw = raw[k:]
			time.Sleep(time.Duration(rng.Intn(30)) * time.Millisecond)
		}
	}
	return s10TranscriptWith(t, addr, w, methods, 1500*time.Millisecond)
}
