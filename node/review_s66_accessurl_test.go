package node

import (
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"
)

// TestS66AccessJSONURLOfAnAbsoluteFormRequest: the JSON access log's
// "url" is the Host and the request target glued together (access.go:
// e.Host + e.URI), which is right for an origin-form target ("/y") only.
// A client may send the absolute form (RFC 9112 §3.2.2: a server must
// accept it), and then the field reads "blog.testhttp://blog.test/y", or,
// with userinfo the client chooses, "blog.testhttp://anything@blog.test/x":
// not a URL, and holding a host-like string of the client's choosing that
// a log pipeline keyed on url attributes to no page or the wrong one.
// Steps: a node with a JSON access log; the same page asked in origin
// form and in absolute form (with and without userinfo). Expected: each
// line's url is blog.test/y, the host and the origin-form target.
func TestS66AccessJSONURLOfAnAbsoluteFormRequest(t *testing.T) {
	o := newS7Origin(t, "A")
	f := t.TempDir() + "/access.log"
	n := startS7Node(t, "log: {access: '"+f+"', access_format: json}\nsites:\n"+
		s7Site("shop", []string{"shop.test"}, []string{o.URL}, "")+s7Site("blog", []string{"blog.test"}, []string{o.URL}, ""))
	for _, h := range []string{
		"GET /y HTTP/1.1\r\nHost: blog.test\r\n",
		"GET http://blog.test/y HTTP/1.1\r\nHost: blog.test\r\n",
		"GET http://shop.test.evil.example@blog.test/y HTTP/1.1\r\nHost: shop.test\r\n",
	} {
		if resp, _ := rawAsk(t, n.pub, h+"Connection: close\r\n\r\n"); resp.StatusCode != 200 {
			t.Fatalf("%q: %d", h, resp.StatusCode)
		}
	}
	var lines []string
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		b, _ := os.ReadFile(f)
		if lines = strings.Split(strings.TrimSpace(string(b)), "\n"); len(lines) >= 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("access log: %q", lines)
		}
	}
	var urls []string
	for _, l := range lines {
		var e struct {
			URL string `json:"url"`
		}
		if err := json.Unmarshal([]byte(l), &e); err != nil {
			t.Fatalf("%q: %v", l, err)
		}
		urls = append(urls, e.URL)
	}
	for _, u := range urls {
		if u != "blog.test/y" {
			t.Errorf("url %q; the page is blog.test/y (as its origin-form request logs it)", u)
		}
	}
}
