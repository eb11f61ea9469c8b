package main

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path"
	"path/filepath"
	"strings"
	"testing"
)

// TestE2EBypassRuleEvadedByCaseOnACaseInsensitiveOrigin: a real edge
// process with the rules of TestE2EBypassRuleEvadedBySpellingsOfItsPath
// in front of an origin that routes case-insensitively, as Express (by
// default), ASP.NET Core and IIS do. A victim who follows a link to
// /API/me gets their API answer stored; the next user is served it (by
// the HTTP/1.1 hit path).
func TestE2EBypassRuleEvadedByCaseOnACaseInsensitiveOrigin(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.HasPrefix(strings.ToLower(path.Clean("/"+r.URL.Path)), "/api/") {
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
	for _, target := range []string{"/api/me", "/API/me", "/Api/Me"} {
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
