package main

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// rawGet sends target as written (no client cleans it) to addr and
// returns the response's Cache-Status and body.
func rawGet(t *testing.T, addr, target string, hdr ...string) (string, string) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	req := "GET " + target + " HTTP/1.1\r\nHost: shop.test\r\nConnection: close\r\n"
	for i := 0; i+1 < len(hdr); i += 2 {
		req += hdr[i] + ": " + hdr[i+1] + "\r\n"
	}
	if _, err := io.WriteString(c, req+"\r\n"); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("GET %s: %v", target, err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp.Header.Get("Cache-Status"), string(body)
}

// TestE2EBypassRuleEvadedBySpellingsOfItsPath: a real edge process with
// the WordPress-style rules of docs/rules.md (the API bypassed, pages
// cached), in front of an origin that resolves dot segments and merges
// slashes as nginx, Apache, Tomcat and IIS do. A victim who followed a
// link to //api/me (or /./api/me, /x/../api/me) had their API answer
// stored by the edge, and the next user got it (a review's test).
func TestE2EBypassRuleEvadedBySpellingsOfItsPath(t *testing.T) {
	apiBypassHolds(t, func(p string) string { return path.Clean("/" + p) }, "/api/me", "//api/me", "/./api/me", "/x/../api/me", "/%2e/api/me")
}

// apiBypassHolds starts an edge process with a bypass of /api/ and a rule
// caching pages, in front of an origin that reads a request's path
// through readPath (as the kind of origin under test does) and answers
// /api/ with a per-user page marked for the browser's cache; for each
// target, another user must never get alice's answer.
func apiBypassHolds(t *testing.T, readPath func(string) string, targets ...string) {
	t.Helper()
	if testing.Short() {
		t.Skip("starts processes")
	}
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.HasPrefix(readPath(r.URL.Path), "/api/") {
			_, _ = io.WriteString(w, "page")
			return
		}
		user := "anonymous"
		if c, err := r.Cookie("sid"); err == nil {
			user = c.Value
		}
		w.Header().Set("Cache-Control", "max-age=60") // for the browser; the operator bypasses /api/
		_, _ = io.WriteString(w, "api answer for "+user)
	}))
	t.Cleanup(origin.Close)
	pub, adm := freeAddr(t), freeAddr(t)
	file := filepath.Join(t.TempDir(), "edge.yaml")
	conf := fmt.Sprintf("listen: %q\nadmin:\n  listen: %q\nnode_id: \"edge-rules\"\norigin:\n  url: %q\nrules:\n"+
		"  - {name: api, match: {path: /api/}, bypass: true}\n  - {name: pages, default_ttl: 5m}\n", pub, adm, origin.URL)
	if err := os.WriteFile(file, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	startEdge(t, "serve", "-c", file)
	waitUp(t, "http://"+adm+"/readyz")
	for _, target := range targets {
		_, a := rawGet(t, pub, target, "Cookie", "sid=alice")
		if !strings.Contains(a, "alice") {
			t.Fatalf("%s: alice got %q", target, a)
		}
		cs, m := rawGet(t, pub, target)
		if strings.Contains(m, "alice") {
			t.Errorf("%s: another user got %q (Cache-Status %q): the bypass of /api/ did not apply", target, m, cs)
		}
	}
}

// TestE2EPagesRuleStaleWindowServesACookieAnswer: a real edge process
// with the WordPress example's "pages" rule (default_ttl 5m,
// stale_while_revalidate 1m, stale_if_error 1h) in front of an origin that
// answers a session's page with max-age=0 and an ETag (nginx's "expires
// 0", Express with max-age 0): "always revalidate". The next visitor
// within the rule's stale window gets the session's page.
func TestE2EPagesRuleStaleWindowServesACookieAnswer(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		user := "anonymous"
		if c, err := r.Cookie("woocommerce_session"); err == nil {
			user = c.Value
		}
		w.Header().Set("Cache-Control", "max-age=0")
		w.Header().Set("ETag", `"`+user+`"`)
		_, _ = io.WriteString(w, "cart of "+user)
	}))
	t.Cleanup(origin.Close)
	pub, adm := freeAddr(t), freeAddr(t)
	file := filepath.Join(t.TempDir(), "edge.yaml")
	conf := fmt.Sprintf("listen: %q\nadmin:\n  listen: %q\nnode_id: \"edge-rules\"\norigin:\n  url: %q\nrules:\n"+
		"  - {name: pages, default_ttl: 5m, stale_while_revalidate: 1m, stale_if_error: 1h, key: {ignore_params: [utm_*, fbclid, gclid]}}\n", pub, adm, origin.URL)
	if err := os.WriteFile(file, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	startEdge(t, "serve", "-c", file)
	waitUp(t, "http://"+adm+"/readyz")
	if _, a := rawGet(t, pub, "/cart/", "Cookie", "woocommerce_session=alice"); !strings.Contains(a, "alice") {
		t.Fatalf("alice got %q", a)
	}
	time.Sleep(1100 * time.Millisecond) // Age 1: past max-age=0
	if cs, b := rawGet(t, pub, "/cart/"); strings.Contains(b, "alice") {
		t.Errorf("an anonymous visitor got %q (Cache-Status %q): the rule's stale window served an answer the origin said to revalidate", b, cs)
	}
}
