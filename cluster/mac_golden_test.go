package cluster

import (
	"net/http"
	"net/url"
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
