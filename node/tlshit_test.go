package node

import (
	"crypto/tls"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestTLSHitPathAnswersAsNetHTTPDoes runs two nodes with the same HTTPS
// listener, one with the hit path and one without, and asks both the same
// HTTPS/1.1 requests: every answer must be the same but for Date and Age,
// and the hit path must have answered the hits itself. On the same
// listener HTTP/2 still negotiates and hits, and a miss that went through
// the hit path's connection still tells the origin it came over HTTPS.
func TestTLSHitPathAnswersAsNetHTTPDoes(t *testing.T) {
	var mu sync.Mutex
	proto := map[string]string{}
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		proto[r.URL.Path] = r.Header.Get("X-Forwarded-Proto")
		mu.Unlock()
		h := w.Header()
		h.Set("Cache-Control", "max-age=600")
		switch r.URL.Path {
		case "/own-hsts":
			// The origin's own field replaces the front's, on both paths.
			h.Set("Strict-Transport-Security", "max-age=1")
			_, _ = io.WriteString(w, "own hsts")
		case "/html":
			h.Set("Content-Type", "text/html")
			_, _ = io.WriteString(w, strings.Repeat("<p>hello</p>", 400))
		case "/big":
			h.Set("Content-Type", "application/octet-stream")
			_, _ = io.WriteString(w, strings.Repeat("b", 100<<10))
		default:
			_, _ = io.WriteString(w, "page "+r.URL.Path)
		}
	}))
	defer origin.Close()
	cp, kp := writePair(t, t.TempDir(), "a", []string{"a.test"}, 1)
	tlsYAML := func(hitPath bool) string {
		hp := "false"
		if hitPath {
			hp = "true"
		}
		return "tls: {listen: '" + freeAddr(t) + "', cert_file: '" + cp + "', key_file: '" + kp + "', hsts: 'max-age=300', http3: true}\n" +
			"tuning: {hit_path: " + hp + "}\n"
	}
	with, without := startNode(t, origin.URL, tlsYAML(true)), startNode(t, origin.URL, tlsYAML(false))
	h1 := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		TLSClientConfig:    &tls.Config{InsecureSkipVerify: true, ServerName: "a.test"}, //nolint:gosec // a test certificate
		TLSNextProto:       map[string]func(string, *tls.Conn) http.RoundTripper{},      // HTTP/1.1 only
		DisableCompression: true,
	}}
	type answer struct {
		status int
		header string
		body   string
	}
	get := func(client *http.Client, n *Node, path string, hdr ...string) (answer, *http.Response) {
		t.Helper()
		req, _ := http.NewRequest("GET", "https://"+n.tls.ln.Addr().String()+path, nil)
		req.Host = "a.test"
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		h := resp.Header.Clone()
		h.Del("Date")
		h.Del("Age")
		if _, port, _ := strings.Cut(n.tls.ln.Addr().String(), ":"); h.Get("Alt-Svc") != "" {
			// Each node advertises its own port.
			h.Set("Alt-Svc", strings.ReplaceAll(h.Get("Alt-Svc"), port, "PORT"))
		}
		var s strings.Builder
		_ = h.Write(&s)
		return answer{resp.StatusCode, s.String(), string(b)}, resp
	}
	requests := [][]string{
		{"/a"}, {"/a?x=1"}, {"/own-hsts"}, {"/big"},
		{"/html"}, {"/html", "Accept-Encoding", "gzip"}, {"/html", "Accept-Encoding", "br, gzip"},
		{"/a", "Cookie", "c=1"}, {"/a", "Range", "bytes=0-2"}, {"/a", "Cache-Control", "no-cache"},
	}
	for _, n := range []*Node{with, without} {
		for _, rq := range requests { // fill, and let the stored forms be made (in the background, after a hit)
			for range 2 {
				get(h1, n, rq[0], rq[1:]...)
				n.Proxy().Wait()
			}
		}

	}
	before := with.hitM.Stats().Answered
	for _, rq := range requests {
		for range 2 {
			a, _ := get(h1, with, rq[0], rq[1:]...)
			b, _ := get(h1, without, rq[0], rq[1:]...)
			if a != b {
				t.Errorf("%v: with the hit path\n%d %s%q\nwithout\n%d %s%q", rq, a.status, a.header, a.body, b.status, b.header, b.body)
			}
		}
	}
	if answered := with.hitM.Stats().Answered - before; answered < 8 {
		t.Fatalf("the hit path answered %d HTTPS hits, want at least 8 (/a, /a?x=1, /big, /html twice each)", answered)
	}

	// HTTP/2 on the same listener: negotiated, and a hit.
	h2 := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		TLSClientConfig:   &tls.Config{InsecureSkipVerify: true, ServerName: "a.test"}, //nolint:gosec // a test certificate
		ForceAttemptHTTP2: true, DisableCompression: true,
	}}
	a, resp := get(h2, with, "/a")
	if resp.ProtoMajor != 2 || a.status != 200 || resp.Header.Get("Cache-Status") != with.cfg.NodeID+"; hit" {
		t.Fatalf("h2: %s %d %q", resp.Proto, a.status, resp.Header.Get("Cache-Status"))
	}

	// A miss on a connection inside the hit path is HTTPS to the origin.
	get(h1, with, "/fresh-miss")
	mu.Lock()
	defer mu.Unlock()
	if proto["/fresh-miss"] != "https" {
		t.Fatalf("X-Forwarded-Proto of a miss over HTTPS/1.1 with the hit path: %q, want https", proto["/fresh-miss"])
	}
}
