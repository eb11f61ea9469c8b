package node

import (
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/edgecache/edge/config"
)

// TestClusterKeysEndpoint: POST /cluster/keys needs the admin token,
// refuses a short secret and an unknown operation with the reason, and
// rotates the membership key: install, use, remove the old one.
func TestClusterKeysEndpoint(t *testing.T) {
	cfg, err := config.LoadBytes([]byte(`origin: {url: 'http://127.0.0.1:1'}
listen: '` + freeAddr(t) + `'
admin: {listen: '` + freeAddr(t) + `', token: tok}
cluster: {listen: '` + freeAddr(t) + `', peers: 'other=127.0.0.1:1', secret: 'the-first-cluster-secret'}
`))
	if err != nil {
		t.Fatal(err)
	}
	n, err := New(cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = n.pubLn.Close(); _ = n.admLn.Close(); _ = n.peerLn.Close(); _ = n.peerUDP.Close() }()
	h := n.adminRouter()
	call := func(method, target, body string, token bool) (int, map[string]any) {
		r := httptest.NewRequest(method, target, strings.NewReader(body))
		if token {
			r.Header.Set("Authorization", "Bearer tok")
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		var out map[string]any
		_ = json.Unmarshal(w.Body.Bytes(), &out)
		return w.Code, out
	}
	keys := func(out map[string]any) int { k, _ := out["keys"].([]any); return len(k) }
	if code, _ := call("POST", "/cluster/keys?op=install", "the-next-cluster-secret", false); code != http.StatusUnauthorized {
		t.Fatalf("without the token: %d", code)
	}
	if code, out := call("POST", "/cluster/keys?op=install", "short", true); code != http.StatusBadRequest || !strings.Contains(out["error"].(string), "at least 16") {
		t.Fatalf("a short secret: %d %v", code, out)
	}
	if code, out := call("POST", "/cluster/keys?op=rotate", "the-next-cluster-secret", true); code != http.StatusBadRequest || !strings.Contains(out["error"].(string), "install, use or remove") {
		t.Fatalf("an unknown operation: %d %v", code, out)
	}
	for _, step := range []struct {
		op, secret string
		want       int
	}{{"install", "the-next-cluster-secret", 2}, {"use", "the-next-cluster-secret", 2}, {"remove", "the-first-cluster-secret", 1}} {
		code, out := call("POST", "/cluster/keys?op="+step.op, step.secret, true)
		if code != http.StatusOK || keys(out) != step.want {
			t.Fatalf("%s: %d %v", step.op, code, out)
		}
	}
	if code, out := call("GET", "/cluster/keys", "", true); code != http.StatusOK || keys(out) != 1 {
		t.Fatalf("list: %d %v", code, out)
	}
}
