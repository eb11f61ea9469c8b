package node

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestS29AdminNoCORSForABrowserPage: a page on another origin cannot use
// the admin API from an operator's browser: a preflight for a purge with
// an Authorization field is given no Access-Control-Allow-* field (so
// the browser never sends the purge), no admin answer carries one (so a
// cross-origin read of status.json or /metrics is blocked), and the
// simple requests a page can send without a preflight (a form POST with
// the Basic credentials the browser keeps after /status?login=1) purge
// nothing.
func TestS29AdminNoCORSForABrowserPage(t *testing.T) {
	o := newS7Origin(t, "A")
	n := startS7Node(t, "sites:\n"+s7Site("shop", []string{"shop.test"}, []string{o.URL}, ""))
	n.get("shop.test", "/p")
	n.Proxy().Wait()
	for _, a := range []string{
		"OPTIONS /purge?url=http://shop.test/p HTTP/1.1\r\nHost: " + n.adm + "\r\nOrigin: https://evil.example\r\nAccess-Control-Request-Method: POST\r\nAccess-Control-Request-Headers: authorization\r\n",
		"OPTIONS /reload HTTP/1.1\r\nHost: " + n.adm + "\r\nOrigin: https://evil.example\r\nAccess-Control-Request-Method: POST\r\nAccess-Control-Request-Headers: authorization\r\n",
		"GET /status.json HTTP/1.1\r\nHost: " + n.adm + "\r\nOrigin: https://evil.example\r\n",
		"GET /metrics HTTP/1.1\r\nHost: " + n.adm + "\r\nOrigin: null\r\n",
		"POST /purge?url=http://shop.test/p HTTP/1.1\r\nHost: " + n.adm + "\r\nOrigin: https://evil.example\r\nContent-Type: application/x-www-form-urlencoded\r\nAuthorization: Basic " + basic("admin:"+s7Token) + "\r\n",
		"POST /purge?url=http://shop.test/p HTTP/1.1\r\nHost: " + n.adm + "\r\nOrigin: https://evil.example\r\nContent-Type: text/plain\r\nCookie: token=" + s7Token + "\r\n",
	} {
		resp, body := rawAsk(t, n.adm, a+"Content-Length: 0\r\nConnection: close\r\n\r\n")
		line, _, _ := strings.Cut(a, "\r\n")
		for k := range resp.Header {
			if strings.HasPrefix(strings.ToLower(k), "access-control-") {
				t.Errorf("%q: answer carries %s: %q", line, k, resp.Header.Get(k))
			}
		}
		if strings.HasPrefix(line, "POST") && (resp.StatusCode < 400 || strings.Contains(body, `"purged"`)) {
			t.Errorf("%q: a cross-site simple request acted: %d %q", line, resp.StatusCode, body)
		}
	}
	if !s29Cached(t, n, o, "/p") {
		t.Error("/p was purged by a cross-site request")
	}
}

// A review found: the admin listener answers whatever Host a request
// names, so it is open to DNS rebinding: a web page an operator opens can
// rebind its own name (rebind.evil.example) to the listener's address and
// read the open pages (/status, /status.json, /metrics) as same-origin.
// Not refused (a Host allow-list breaks every operator who reaches the
// listener by a name of its own: a Prometheus target, an admin.tls
// certificate's name on loopback; docs/operations.md says so): instead
// the open pages hold no secret any more (the membership key
// fingerprints and the values rules set on requests are hidden without
// the token, and origin URLs cannot carry credentials), and everything
// that acts or names users needs the bearer token, which a page cannot
// send. This holds that what such a page reads carries neither.
func TestS29AdminARebindingPageReadsNoSecret(t *testing.T) {
	const shared = "OriginVerify-rebind-51"
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "ok") }))
	defer origin.Close()
	adm, cl := freeAddr(t), freeAddr(t)
	startNodeYAML(t, "node_id: a\nlisten: '"+freeAddr(t)+"'\nadmin: {listen: '"+adm+"', token: 'admin-token-0123456789'}\n"+
		"origin: {url: '"+origin.URL+"'}\nrules: [{name: pages, request_headers: {set: {X-Origin-Verify: '"+shared+"'}}}]\n"+
		"cluster: {listen: '"+cl+"', peers: 'a="+cl+",b="+freeAddr(t)+"', secret: 'rebind-secret-0123456789', heartbeat_period: 50ms}\n")
	_, port, _ := strings.Cut(adm, ":")
	deadline := time.Now().Add(5 * time.Second)
	for {
		resp, body := rawAsk(t, adm, "GET /status.json HTTP/1.1\r\nHost: rebind.evil.example:"+port+"\r\nConnection: close\r\n\r\n")
		if resp.StatusCode != 200 {
			t.Fatalf("status.json: %d", resp.StatusCode)
		}
		if strings.Contains(body, shared) {
			t.Errorf("a rebinding page reads the origin's shared secret")
		}
		if strings.Contains(body, `"fingerprint"`) {
			if !strings.Contains(body, `"fingerprint":"`+keyHidden+`"`) || strings.Count(body, `"fingerprint":"`) != strings.Count(body, `"fingerprint":"`+keyHidden) {
				t.Errorf("a rebinding page reads a membership key fingerprint: %s", body[strings.Index(body, `"keys"`):][:120])
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("no membership keys on status.json")
		}
		time.Sleep(50 * time.Millisecond)
	}
}
