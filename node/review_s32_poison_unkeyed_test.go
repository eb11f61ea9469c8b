package node

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"testing"
)

// s32pEchoOrigin answers every request, cacheable for 10 minutes, with
// what it saw: method, target, Host, framing, body and every field.
func s32pEchoOrigin(t *testing.T) *httptest.Server {
	t.Helper()
	o := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		names := make([]string, 0, len(r.Header))
		for k := range r.Header {
			names = append(names, k)
		}
		sort.Strings(names)
		var b strings.Builder
		fmt.Fprintf(&b, "%s %s host=%s cl=%d te=%v body=%q\n", r.Method, r.RequestURI, r.Host, r.ContentLength, r.TransferEncoding, body)
		for _, k := range names {
			fmt.Fprintf(&b, "%s: %q\n", k, r.Header[k])
		}
		w.Header().Set("Cache-Control", "public, max-age=600")
		_, _ = io.WriteString(w, b.String())
	}))
	t.Cleanup(o.Close)
	return o
}

// TestS32UnkeyedInputsDoNotReachTheStoredPage documents attacks that held:
// each request below fills a cold URL with an unkeyed input the origin
// could render (forwarding fields, rewrites, method overrides, a fat or
// chunked GET, an absolute-form target naming another host, an empty
// query, a host spelling, a field Connection names); a plain request for
// the same URL right after must get exactly what a plain request's fill
// gets (the origin echoes everything it saw).
func TestS32UnkeyedInputsDoNotReachTheStoredPage(t *testing.T) {
	o := s32pEchoOrigin(t)
	n := startNode(t, o.URL, "")
	addr := n.PublicAddr()
	attacks := []struct{ name, path, head string }{
		{"x-forwarded-host", "/a1", "GET /a1 HTTP/1.1\r\nHost: x\r\nX-Forwarded-Host: evil\r\nX-Forwarded-Port: 6666\r\nX-Forwarded-Prefix: /evil\r\n"},
		{"x-host", "/a2", "GET /a2 HTTP/1.1\r\nHost: x\r\nX-Host: evil\r\nX-Forwarded-Server: evil\r\nX-HTTP-Host-Override: evil\r\n"},
		{"url-rewrite", "/a3", "GET /a3 HTTP/1.1\r\nHost: x\r\nX-Original-URL: /evil\r\nX-Rewrite-URL: /evil\r\n"},
		{"method-override", "/a4", "GET /a4 HTTP/1.1\r\nHost: x\r\nX-HTTP-Method-Override: DELETE\r\nX-HTTP-Method: DELETE\r\nX-Method-Override: DELETE\r\n"},
		{"forwarded", "/a5", "GET /a5 HTTP/1.1\r\nHost: x\r\nForwarded: host=evil;proto=https\r\n"},
		{"fat-get", "/a6", "GET /a6 HTTP/1.1\r\nHost: x\r\nContent-Length: 6\r\n\r\nevil=1"},
		{"chunked-get", "/a7", "GET /a7 HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n4\r\nevil\r\n0\r\n\r\n"},
		{"absolute-form", "/a8", "GET http://x/a8 HTTP/1.1\r\nHost: evil\r\n"},
		{"scheme", "/a9", "GET /a9 HTTP/1.1\r\nHost: x\r\nX-Forwarded-Proto: https\r\nX-Forwarded-Scheme: evil\r\nX-Forwarded-Ssl: on\r\nFront-End-Https: on\r\nX-Url-Scheme: evil\r\n"},
		{"underscore", "/a10", "GET /a10 HTTP/1.1\r\nHost: x\r\nX_Forwarded_Host: evil\r\nX_Forwarded_Prefix: /evil\r\n"},
		{"connection-nominated", "/a11", "GET /a11 HTTP/1.1\r\nHost: x\r\nConnection: keep-alive, X-Evil\r\nX-Evil: evil\r\n"},
		{"empty-query", "/a12", "GET /a12? HTTP/1.1\r\nHost: x\r\n"},
		{"host-spelling", "/a13", "GET /a13 HTTP/1.1\r\nHost: X.:8080\r\n"},
		{"upgrade-h2c", "/a14", "GET /a14 HTTP/1.1\r\nHost: x\r\nUpgrade: h2c\r\nConnection: Upgrade, HTTP2-Settings\r\nHTTP2-Settings: AAMAAABkAAQAAP__\r\n"},
		{"te-trailer", "/a15", "GET /a15 HTTP/1.1\r\nHost: x\r\nTE: trailers\r\nTrailer: X-Evil\r\n"},
		{"edge-fields", "/a16", "GET /a16 HTTP/1.1\r\nHost: x\r\nEdge-Route: evil\r\nEdge-Cache-Control: max-age=1\r\n"},
	}
	for _, a := range attacks {
		head := a.head
		if strings.Contains(head, "\r\n\r\n") {
			head = strings.Replace(head, "Host: ", "Connection: close\r\nHost: ", 1)
		} else {
			head += "Connection: close\r\n\r\n"
		}
		ar, ab := rawAsk(t, addr, head)
		_, base := rawAsk(t, addr, "GET "+a.path+"-base HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
		want := strings.Replace(base, a.path+"-base", a.path, 1)
		pr, got := rawAsk(t, addr, "GET "+a.path+" HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
		if pr.StatusCode != http.StatusOK || got != want || strings.Contains(strings.ToLower(got), "evil") {
			t.Errorf("%s: after the attack (%d, Cache-Status %q) a plain request got %d (Cache-Status %q):\n%s\nwant:\n%s\nattacker got:\n%s",
				a.name, ar.StatusCode, ar.Header.Get("Cache-Status"), pr.StatusCode, pr.Header.Get("Cache-Status"), got, want, ab)
		}
	}
}
