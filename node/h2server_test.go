package node

import (
	"crypto/tls"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestH2ServerAnswersAsNetHTTPDoes runs two nodes with the same HTTPS
// listener and hit path, one on edge's HTTP/2 server and one on net/http's,
// and asks both the same HTTP/2 requests, per-user ones among them: every
// answer must be the same but for Date and Age, and edge's server must have
// answered the plain hits on its read loop. Two users asking for pages that
// differ per user each get their own.
func TestH2ServerAnswersAsNetHTTPDoes(t *testing.T) {
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Cache-Control", "max-age=600")
		switch r.URL.Path {
		case "/vary-cookie":
			h.Set("Vary", "Cookie")
			_, _ = io.WriteString(w, "for "+r.Header.Get("Cookie"))
		case "/auth":
			_, _ = io.WriteString(w, "for "+r.Header.Get("Authorization"))
		case "/set-cookie":
			h.Set("Set-Cookie", "session="+r.URL.RawQuery)
			_, _ = io.WriteString(w, "session "+r.URL.RawQuery)
		case "/private":
			h.Set("Cache-Control", "private, max-age=600")
			_, _ = io.WriteString(w, "private for "+r.Header.Get("Cookie"))
		case "/big":
			h.Set("Content-Type", "application/octet-stream")
			_, _ = io.WriteString(w, strings.Repeat("b", 300<<10)) // beyond the client's first window
		case "/html":
			h.Set("Content-Type", "text/html")
			_, _ = io.WriteString(w, strings.Repeat("<p>hello</p>", 400))
		case "/etag":
			h.Set("ETag", `"v1"`)
			_, _ = io.WriteString(w, "tagged")
		default:
			_, _ = io.WriteString(w, "page "+r.URL.Path+" "+r.URL.RawQuery)
		}
	}))
	defer origin.Close()
	cp, kp := writePair(t, t.TempDir(), "a", []string{"a.test"}, 1)
	tlsYAML := func(server string) string {
		return "tls: {listen: '" + freeAddr(t) + "', cert_file: '" + cp + "', key_file: '" + kp + "', hsts: 'max-age=300'}\n" +
			"tuning: {http2_server: " + server + "}\n"
	}
	edge, goServer := startNode(t, origin.URL, tlsYAML("edge")), startNode(t, origin.URL, tlsYAML("go"))
	h2 := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		TLSClientConfig:   &tls.Config{InsecureSkipVerify: true, ServerName: "a.test"}, //nolint:gosec // a test certificate
		ForceAttemptHTTP2: true, DisableCompression: true,
	}}
	type answer struct {
		status int
		header string
		body   string
	}
	do := func(n *Node, method, path string, hdr ...string) answer {
		t.Helper()
		req, _ := http.NewRequest(method, "https://"+n.tls.ln.Addr().String()+path, nil)
		req.Host = "a.test"
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		resp, err := h2.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatalf("%s %s: reading the body: %v", method, path, err)
		}
		if resp.ProtoMajor != 2 {
			t.Fatalf("%s %s: %s, want HTTP/2", method, path, resp.Proto)
		}
		h := resp.Header.Clone()
		h.Del("Date")
		h.Del("Age")
		var s strings.Builder
		_ = h.Write(&s)
		return answer{resp.StatusCode, s.String(), string(b)}
	}
	requests := [][]string{
		{"GET", "/a"}, {"GET", "/a?x=1"}, {"HEAD", "/a"}, {"GET", "/big"}, {"HEAD", "/big"},
		{"GET", "/html"}, {"GET", "/html", "Accept-Encoding", "gzip"}, {"GET", "/html", "Accept-Encoding", "br, gzip"},
		{"GET", "/a", "Range", "bytes=0-2"}, {"GET", "/a", "Cache-Control", "no-cache"},
		{"GET", "/etag", "If-None-Match", `"v1"`}, {"GET", "/etag"},
		{"GET", "/vary-cookie", "Cookie", "user=alice"}, {"GET", "/vary-cookie", "Cookie", "user=bob"},
		{"GET", "/auth", "Authorization", "Bearer alice"}, {"GET", "/auth", "Authorization", "Bearer bob"},
		{"GET", "/set-cookie?alice"}, {"GET", "/private", "Cookie", "user=alice"}, {"GET", "/private", "Cookie", "user=bob"},
		{"GET", "/a", "X-Unknown-Field", "1"}, {"GET", "/a", "Cookie", "c=1"},
	}
	for _, n := range []*Node{edge, goServer} {
		for _, rq := range requests { // fill, and let the stored forms be made
			for range 2 {
				do(n, rq[0], rq[1], rq[2:]...)
				n.Proxy().Wait()
			}
		}
	}
	hits := func() int64 { return edge.tls.h2.Stats().Hits }
	before := hits()
	for _, rq := range requests {
		for range 2 {
			a, b := do(edge, rq[0], rq[1], rq[2:]...), do(goServer, rq[0], rq[1], rq[2:]...)
			if a != b {
				t.Errorf("%v: edge's HTTP/2 server\n%d %s%q\nnet/http's\n%d %s%q", rq, a.status, a.header, a.body, b.status, b.header, b.body)
			}
		}
	}
	if answered := hits() - before; answered < 10 {
		t.Fatalf("the read loop answered %d hits, want at least 10 (/a, /a?x=1, HEAD /a, /big, /html and others, twice each)", answered)
	}
	// Per-user pages: each user gets only their own, whichever path answers.
	for _, u := range []string{"alice", "bob"} {
		if a := do(edge, "GET", "/vary-cookie", "Cookie", "user="+u); a.body != "for user="+u {
			t.Fatalf("Vary: Cookie page for %s: %q", u, a.body)
		}
		if a := do(edge, "GET", "/auth", "Authorization", "Bearer "+u); a.body != "for Bearer "+u {
			t.Fatalf("Authorization page for %s: %q", u, a.body)
		}
		if a := do(edge, "GET", "/private", "Cookie", "user="+u); a.body != "private for user="+u {
			t.Fatalf("private page for %s: %q", u, a.body)
		}
	}
	if a := do(edge, "GET", "/set-cookie?bob"); strings.Contains(a.header, "alice") {
		t.Fatalf("another user's Set-Cookie: %s", a.header)
	}
	// The status page shows the server's counts.
	resp, err := http.Get("http://" + edge.AdminAddr() + "/status")
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(page), "HTTP/2 (edge's server): open connections") {
		t.Fatalf("the status page has no HTTP/2 line:\n%s", page)
	}
}
