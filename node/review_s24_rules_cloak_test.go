package node

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// A review found (now mended): through a real node, "GET http://shop.test HTTP/1.1" (absolute
// form, no path: URL.Path "") reaches proxy.rulingOf with path "", which no
// rule matches (a rule's default prefix "/" is not a prefix of ""), while
// the key and the forwarded target are "/". The request for the home page
// gets no rule: here, the X-Tenant field a rule sets for every request is
// not sent, and the origin's answer for no tenant is stored in the variant
// plain "GET /" requests read (the set field is left out of their key), so
// every visitor of / gets it. Fix: read an empty path as "/" before rules
// are looked up (proxy/rules.go rulingOf; or normalise r.URL.Path at the
// front). See proxy/review_s24_rules_emptypath_test.go.
func TestS24AbsoluteFormWithoutPathPoisonsTheHomePage(t *testing.T) {
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tenant := r.Header.Get("X-Tenant")
		if tenant == "" {
			tenant = "default-tenant"
		}
		w.Header().Set("Cache-Control", "max-age=600")
		_, _ = io.WriteString(w, "home of "+tenant)
	}))
	defer origin.Close()
	n := startNodeYAML(t, "listen: '"+freeAddr(t)+"'\nadmin: {listen: '"+freeAddr(t)+"', token: tok}\n"+
		"sites:\n  - name: shop\n    hosts: [shop.test]\n    origins: ['"+origin.URL+"']\n"+
		"    rules:\n      - {name: pages, request_headers: {set: {X-Tenant: shop}}}\n")

	// The attacker's one request, over a plain connection.
	resp, ab := rawAsk(t, n.PublicAddr(), "GET http://shop.test HTTP/1.1\r\nHost: shop.test\r\nConnection: close\r\n\r\n")
	t.Logf("attacker: %d %q (Cache-Status %q)", resp.StatusCode, ab, resp.Header.Get("Cache-Status"))

	// A visitor's plain request for the home page.
	req, _ := http.NewRequest("GET", "http://"+n.PublicAddr()+"/", nil)
	req.Host = "shop.test"
	vr, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	vb, _ := io.ReadAll(vr.Body)
	vr.Body.Close()
	if !strings.Contains(string(vb), "home of shop") {
		t.Errorf("a visitor's GET / got %q (Cache-Status %q): the answer to an absolute-form request no rule applied to was stored for everyone", vb, vr.Header.Get("Cache-Status"))
	}
}

// A review found (now mended): through a real node, a '#' in the query ("?utm_source=x#&id=2",
// sent raw over HTTP/1.1) is accepted, forwarded as sent, and keyed by
// ignore_params as "?id=2", while an origin that cuts the fragment
// (Express, Node's url.parse) answers for no id: the answer is stored for
// every visitor of ?id=2. See proxy/review_s24_rules_fragment_test.go.
func TestS24FragmentInQueryPoisonsAKeyedPage(t *testing.T) {
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q, _, _ := strings.Cut(r.URL.RawQuery, "#") // Express: the query ends at '#'
		id := "none"
		for _, kv := range strings.Split(q, "&") {
			if v, ok := strings.CutPrefix(kv, "id="); ok {
				id = v
			}
		}
		w.Header().Set("Cache-Control", "max-age=600")
		_, _ = io.WriteString(w, "product "+id)
	}))
	defer origin.Close()
	n := startNodeYAML(t, "listen: '"+freeAddr(t)+"'\nadmin: {listen: '"+freeAddr(t)+"', token: tok}\n"+
		"sites:\n  - name: shop\n    hosts: [shop.test]\n    origins: ['"+origin.URL+"']\n"+
		"    rules:\n      - {name: pages, key: {ignore_params: ['utm_*']}}\n")
	resp, ab := rawAsk(t, n.PublicAddr(), "GET /products?utm_source=x#&id=2 HTTP/1.1\r\nHost: shop.test\r\nConnection: close\r\n\r\n")
	t.Logf("attacker: %d %q (Cache-Status %q)", resp.StatusCode, ab, resp.Header.Get("Cache-Status"))
	req, _ := http.NewRequest("GET", "http://"+n.PublicAddr()+"/products?id=2", nil)
	req.Host = "shop.test"
	vr, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	vb, _ := io.ReadAll(vr.Body)
	vr.Body.Close()
	if string(vb) != "product 2" {
		t.Errorf("a visitor's GET /products?id=2 got %q (Cache-Status %q)", vb, vr.Header.Get("Cache-Status"))
	}
}
