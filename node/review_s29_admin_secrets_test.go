package node

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edgecache/edge/config"
)

// s29Get is an anonymous GET (no Authorization) and its body.
func s29Get(t *testing.T, u string) (int, string) {
	t.Helper()
	c := &http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// A review found (now mended): an origin URL with credentials in it
// (origins: ['http://deploy:S3cr3tOriginPass@127.0.0.1:PORT']) is accepted
// by the configuration (httpURL only checks scheme and host) and then
// published, password and all, to anyone who can reach the admin
// listener without the token: GET /status.json ("sites[].origins[].url"),
// GET /status (the Origins table) and GET /metrics
// (edge_origin_up{origin="http://deploy:S3cr3tOriginPass@…"}), and it is
// written into every access log line of a miss (upstream_addr). Nor is it
// used: the origin client calls Transport.RoundTrip, which never turns
// URL userinfo into an Authorization field, so the operator's origin
// credentials leak while doing nothing. Expected: the configuration
// refuses userinfo in an origin URL (naming the key, without echoing the
// password), or every place that shows the URL redacts it
// (url.URL.Redacted).
func TestS29AdminOriginCredentialsAreNotPublished(t *testing.T) {
	const pass = "S3cr3tOriginPass"
	yaml := "node_id: s29\nlisten: '" + freeAddr(t) + "'\nadmin: {listen: '" + freeAddr(t) + "', token: 'admin-token-0123456789'}\n" +
		"sites:\n  - name: shop\n    hosts: ['shop.test']\n    origins: ['http://deploy:" + pass + "@127.0.0.1:1']\n"
	// Now mended: the configuration refuses the URL, naming the key and
	// without echoing the password (config.originURL), so no node starts
	// with it and nothing can publish it.
	_, err := config.LoadBytes([]byte(yaml))
	if err == nil || !strings.Contains(err.Error(), "sites[0].origins[0]") || !strings.Contains(err.Error(), "credentials") {
		t.Fatalf("an origin URL with credentials: %v, want it refused naming sites[0].origins[0]", err)
	}
	if strings.Contains(err.Error(), pass) {
		t.Errorf("the refusal echoes the password: %v", err)
	}
}

// A review found (now mended): the status page and status.json, open without the admin token,
// list the membership keys' fingerprints, and a fingerprint is
// hex(SHA-256(SHA-256("edge membership key\x00" + cluster.secret))[:6]):
// an unsalted, fast hash of the cluster secret. One anonymous
// GET /status.json gives an outsider an offline oracle for guessing
// cluster.secret (48 bits: a matching guess is the secret), with no
// further request to the node, the same class of leak as the config hash
// that config.Hash now leaves the secrets out of. cluster.secret signs
// every peer request (purges, relayed fills) and heartbeat, so a guessed
// secret purges or poisons the whole cluster. Expected: no
// fingerprint derived from the secret alone on the anonymous page (hide
// the keys without the token, or derive the fingerprint with a per-node
// random salt shown beside it and a slow KDF, or from a MAC under a key
// that is not public).
func TestS29AdminKeyFingerprintIsNoOracleForTheClusterSecret(t *testing.T) {
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "ok") }))
	defer origin.Close()
	const secret = "edge-cluster-2024!"
	cl, adm := freeAddr(t), freeAddr(t)
	startNodeYAML(t, "node_id: a\nlisten: '"+freeAddr(t)+"'\nadmin: {listen: '"+adm+"', token: 'admin-token-0123456789'}\n"+
		"origin: {url: '"+origin.URL+"'}\n"+
		"cluster: {listen: '"+cl+"', peers: 'a="+cl+",b="+freeAddr(t)+"', secret: '"+secret+"', heartbeat_period: 50ms}\n")
	var fps []string
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) && len(fps) == 0 {
		_, body := s29Get(t, "http://"+adm+"/status.json")
		var st struct {
			Monitoring *struct {
				Membership struct {
					Keys []struct{ Fingerprint string }
				}
			}
		}
		if err := json.Unmarshal([]byte(body), &st); err != nil {
			t.Fatal(err)
		}
		if st.Monitoring != nil {
			for _, k := range st.Monitoring.Membership.Keys {
				fps = append(fps, k.Fingerprint)
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	if len(fps) == 0 {
		t.Fatal("no membership keys shown on status.json")
	}
	// The attacker's offline dictionary run against the anonymous page.
	fp := func(s string) string {
		k := sha256.Sum256(append([]byte("edge membership key\x00"), s...))
		sum := sha256.Sum256(k[:])
		return hex.EncodeToString(sum[:6])
	}
	for _, guess := range []string{"changeme-changeme", "edge-cluster-secret", "edge-cluster-2023!", "edge-cluster-2024!", "edge-cluster-2025!"} {
		for _, f := range fps {
			if fp(guess) == f {
				t.Errorf("anonymous status.json shows membership key fingerprint %s, which confirms the guess %q of cluster.secret offline", f, guess)
			}
		}
	}
}

// A review found (now mended): docs/rules.md offers request_headers.set for "a shared secret
// for the origin" (the usual origin-verify field that lets the origin
// accept only the CDN's requests), and the anonymous status page prints
// every rule's edits with their values: with
// rules: [{name: pages, request_headers: {set: {X-Origin-Verify: <secret>}}}]
// GET /status (no token) shows `request field X-Origin-Verify set to
// "<secret>"` and GET /status.json the same in sites[].rules[].does. So
// anyone who reaches the admin listener (or a rebinding page, see
// TestS29AdminARebindingPageReadsNoSecret) gets the secret and can talk to the
// origin directly as if it were the edge, bypassing the cache's rules and
// rate limits. Expected: request field values set by a rule are not shown
// without the admin token (name the field, hide the value), as the
// hottest URLs are hidden.
func TestS29AdminRuleHeaderSecretsAreNotPublished(t *testing.T) {
	const shared = "OriginVerify-7f3a9c0e51"
	var got atomic.Value
	got.Store("")
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got.Store(r.Header.Get("X-Origin-Verify"))
		w.Header().Set("Cache-Control", "max-age=600")
		_, _ = io.WriteString(w, "ok")
	}))
	defer origin.Close()
	adm := freeAddr(t)
	n := startNodeYAML(t, "node_id: s29\nlisten: '"+freeAddr(t)+"'\nadmin: {listen: '"+adm+"', token: 'admin-token-0123456789'}\n"+
		"sites:\n  - name: shop\n    hosts: ['shop.test']\n    origins: ['"+origin.URL+"']\n"+
		"    rules:\n      - {name: pages, request_headers: {set: {X-Origin-Verify: '"+shared+"'}}}\n")
	rawAsk(t, n.PublicAddr(), "GET /a HTTP/1.1\r\nHost: shop.test\r\nConnection: close\r\n\r\n")
	if got.Load() != shared {
		t.Fatalf("the origin did not get the shared secret: %q", got.Load())
	}
	for _, p := range []string{"/status?refresh=0", "/status.json"} {
		_, body := s29Get(t, "http://"+adm+p)
		if i := strings.Index(body, shared); i >= 0 {
			t.Errorf("anonymous GET %s shows the origin's shared secret: …%s…", p, body[max(0, i-80):min(len(body), i+30)])
		}
	}
}
