package node

import (
	"strings"
	"testing"
)

// TestS7TwoSitesSamePathsNeverMix tries Host spellings and request-target
// forms against two sites with the same paths (plain listener, the
// HTTP/1.1 hit path on by default): case, trailing dot, port, the
// absolute form naming the other site than Host (RFC 9112 §3.2.2: the
// target's authority wins, as net/http does), userinfo in the absolute
// form, odd bytes and userinfo in Host, duplicate Host fields, HTTP/1.0
// without Host. It holds: every answer carries its own site's origin, and
// what is not a host is refused.
func TestS7TwoSitesSamePathsNeverMix(t *testing.T) {
	a := newS7Origin(t, "A")
	b := newS7Origin(t, "B")
	n := startS7Node(t, "sites:\n"+s7Site("a", []string{"a.test"}, []string{a.URL}, "")+s7Site("b", []string{"b.test"}, []string{b.URL}, ""))
	raw := func(head string) (int, string) {
		t.Helper()
		resp, body := rawAsk(t, n.pub, head)
		return resp.StatusCode, body
	}
	// Absolute forms first, while the cache is cold: whatever they store
	// must be under b's key.
	cases := []struct {
		head string
		want string // "origin=X" or a status
	}{
		{"GET http://b.test/x HTTP/1.1\r\nHost: a.test\r\nConnection: close\r\n\r\n", "origin=B"},
		{"GET http://a.test@b.test/y HTTP/1.1\r\nHost: a.test\r\nConnection: close\r\n\r\n", "origin=B"},
		{"GET https://B.TEST.:8443/z HTTP/1.1\r\nHost: a.test\r\nConnection: close\r\n\r\n", "origin=B"},
	}
	for round := 0; round < 2; round++ {
		for _, c := range cases {
			code, body := raw(c.head)
			if !strings.Contains(body, c.want) {
				t.Errorf("%q: %d %q, want %s", c.head, code, body, c.want)
			}
		}
		n.Proxy().Wait()
	}
	for _, p := range []string{"/x", "/y", "/z"} {
		for _, h := range []string{"a.test", "A.Test", "a.test.", "a.test:80", "a.test:8080"} {
			if code, body := n.get(h, p); code != 200 || !strings.Contains(body, "origin=A") {
				t.Errorf("Host %q %s after b's absolute-form fills: %d %q, want origin=A", h, p, code, body)
			}
		}
		for _, h := range []string{"b.test", "B.TEST", "b.test.", "b.test:443"} {
			if code, body := n.get(h, p); code != 200 || !strings.Contains(body, "origin=B") {
				t.Errorf("Host %q %s: %d %q, want origin=B", h, p, code, body)
			}
		}
	}
	for _, head := range []string{
		"GET /x HTTP/1.1\r\nHost: a.test@b.test\r\nConnection: close\r\n\r\n",
		"GET /x HTTP/1.1\r\nHost: b.test@a.test\r\nConnection: close\r\n\r\n",
		"GET /x HTTP/1.1\r\nHost: a.test%2eb.test\r\nConnection: close\r\n\r\n",
		"GET /x HTTP/1.1\r\nHost: a.test\r\nHost: b.test\r\nConnection: close\r\n\r\n",
		"GET /x HTTP/1.1\r\nHost: a.test, b.test\r\nConnection: close\r\n\r\n",
		"GET /x HTTP/1.1\r\nHost: a.test/b.test\r\nConnection: close\r\n\r\n",
		"GET /x HTTP/1.1\r\nHost: a.test\\b.test\r\nConnection: close\r\n\r\n",
		"GET /x HTTP/1.1\r\nHost: a.test..\r\nConnection: close\r\n\r\n",
		"GET /x HTTP/1.0\r\n\r\n",
		"GET /x HTTP/1.1\r\nHost: \r\nConnection: close\r\n\r\n",
	} {
		code, body := raw(head)
		if code == 200 {
			t.Errorf("%q: %d %q, want a refusal (400 or 421)", head, code, body)
		}
	}
}
