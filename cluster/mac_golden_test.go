package cluster

import (
	"bytes"
	"crypto/sha256"
	"hash"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// TestMACsAreStable pins the bytes the request and response MACs cover:
// nodes of two versions (a rolling upgrade) must compute the same MAC for
// the same message, so a faster way of writing the canonical form may not
// change it. The values were computed by the implementation that wrote
// each string with its own Write (before 2026-12-03).
func TestMACsAreStable(t *testing.T) {
	secret := []byte("a-test-cluster-secret")
	u, _ := url.Parse("http://site.example/p/1?q=a%20b")
	r := &http.Request{Method: "GET", Host: "site.example", URL: u, Header: http.Header{
		"Accept-Encoding": {"gzip, br"},
		"Cookie":          {"a=1", "b=2"},
		"Edge-Node":       {"n1"},
		"Empty":           {""},
		"Empty-Twice":     {"", ""},
		"Connection":      {"keep-alive"}, // unsigned
		"Content-Length":  {"0"},          // unsigned
		"X-Multi":         {"", "x", ""},
	}}
	h := http.Header{
		"Cache-Control": {"max-age=60"},
		"Content-Type":  {"text/plain; charset=utf-8"},
		"Vary":          {"Accept-Encoding", "Cookie"},
		"Trailer":       {"Edge-Body-Auth"}, // unsigned
		"Set-Cookie":    {""},
	}
	if got, want := requestMAC(secret, r), "a500ffb1545e268cc3a43d7c22646e24184e3c948bbae0bc54ec8d51af94dcba"; got != want {
		t.Errorf("request MAC %s, want %s", got, want)
	}
	if got, want := responseMAC(secret, "0123456789abcdef", 200, h), "6725832bb59aca62cf25cab2aa117095ee4aa3b2afaa72c0c6b74cd7a4cb1baf"; got != want {
		t.Errorf("response MAC %s, want %s", got, want)
	}
}

// canonicalReference is the canonical form as the implementation before
// 2026-12-03 wrote it: each string with its own Write.
func canonicalReference(m hash.Hash, h http.Header) {
	names := make([]string, 0, len(h))
	for k, vs := range h {
		if slices.Contains(unsignedFields, k) || strings.Join(vs, "") == "" {
			continue
		}
		names = append(names, k)
	}
	slices.Sort(names)
	for _, k := range names {
		m.Write([]byte(k))
		m.Write([]byte{':'})
		for _, v := range h[k] {
			m.Write([]byte(v))
			m.Write([]byte{'\n'})
		}
		m.Write([]byte{0})
	}
}

// FuzzCanonicalMatchesReference: for any header (names and values taken
// from the input, repeated and empty values, more fields than the sort's
// stack array holds), the one-buffer canonical form hashes to what the
// reference's writes did.
func FuzzCanonicalMatchesReference(f *testing.F) {
	f.Add("Accept-Encoding\x00gzip\x01Cookie\x00a=1\x00b=2\x01Empty\x00\x01Connection\x00close", uint8(1))
	f.Add("", uint8(0))
	f.Add("A\x00\x00x\x00\x01B\x00y", uint8(40))
	f.Fuzz(func(t *testing.T, spec string, extra uint8) {
		h := http.Header{}
		for _, field := range strings.Split(spec, "\x01") {
			name, values, _ := strings.Cut(field, "\x00")
			h[name] = append(h[name], strings.Split(values, "\x00")...)
		}
		for i := range int(extra) {
			h["X-Extra-"+strconv.Itoa(i)] = []string{strconv.Itoa(i)}
		}
		ref := sha256.New()
		canonicalReference(ref, h)
		got := sha256.Sum256(appendCanonical(nil, h))
		if !bytes.Equal(ref.Sum(nil), got[:]) {
			t.Fatalf("canonical form of %q differs from the reference", h)
		}
	})
}
