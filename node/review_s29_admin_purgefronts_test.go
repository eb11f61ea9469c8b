package node

import (
	"bufio"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"
)

// TestS29AdminPurgeReachesEveryFront: a page held as a fresh hit is
// purged through the admin API (hard by URL, soft by URL, by absolute
// prefix, by path prefix, by tag) while the clients keep their
// connections open: the HTTP/1.1 hit loop of the plain listener, the TLS
// listener's HTTP/1.1 hit loop, and HTTP/2 on edge's own server and on
// net/http's. After each purge, every front's next answer is the origin's
// new version; none serves the purged body from a per-connection or
// per-entry copy (the head serialised once per entry, a hit answered on
// an HTTP/2 read loop).
func TestS29AdminPurgeReachesEveryFront(t *testing.T) {
	var version atomic.Int64
	version.Store(1)
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "public, max-age=600")
		w.Header().Set("Surrogate-Key", "grp-"+r.URL.Path[1:])
		_, _ = io.WriteString(w, "v"+itoa(int(version.Load()))+" "+r.URL.Path)
	}))
	defer origin.Close()
	cp, kp := writePair(t, t.TempDir(), "a", []string{"a.test"}, 1)
	const token = "admin-token-0123456789"
	mk := func(server string) *Node {
		return startNodeYAML(t, "listen: '"+freeAddr(t)+"'\nadmin: {listen: '"+freeAddr(t)+"', token: '"+token+"'}\n"+
			"tls: {listen: '"+freeAddr(t)+"', cert_file: '"+cp+"', key_file: '"+kp+"'}\n"+
			"tuning: {hit_path: true, http2_server: "+server+"}\n"+
			"sites:\n  - name: a\n    hosts: [a.test]\n    origins: ['"+origin.URL+"']\n")
	}
	for _, server := range []string{"edge", "go"} {
		n := mk(server)
		// Persistent connections, kept across the purges.
		plain, err := net.Dial("tcp", n.PublicAddr())
		if err != nil {
			t.Fatal(err)
		}
		defer plain.Close()
		plainR := bufio.NewReader(plain)
		tlsC, err := tls.Dial("tcp", n.tls.ln.Addr().String(), &tls.Config{InsecureSkipVerify: true, ServerName: "a.test", NextProtos: []string{"http/1.1"}}) //nolint:gosec // a test certificate
		if err != nil {
			t.Fatal(err)
		}
		defer tlsC.Close()
		tlsR := bufio.NewReader(tlsC)
		h2 := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
			TLSClientConfig:   &tls.Config{InsecureSkipVerify: true, ServerName: "a.test"}, //nolint:gosec // a test certificate
			ForceAttemptHTTP2: true, DisableCompression: true,
		}}
		h1 := func(c net.Conn, r *bufio.Reader, path string) string {
			t.Helper()
			_ = c.SetDeadline(time.Now().Add(5 * time.Second))
			if _, err := io.WriteString(c, "GET "+path+" HTTP/1.1\r\nHost: a.test\r\n\r\n"); err != nil {
				t.Fatal(err)
			}
			resp, err := http.ReadResponse(r, nil)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			return string(b)
		}
		fronts := map[string]func(path string) string{
			"plain h1": func(p string) string { return h1(plain, plainR, p) },
			"tls h1":   func(p string) string { return h1(tlsC, tlsR, p) },
			"h2 " + server: func(p string) string {
				req, _ := http.NewRequest("GET", "https://"+n.tls.ln.Addr().String()+p, nil)
				req.Host = "a.test"
				resp, err := h2.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				if resp.ProtoMajor != 2 {
					t.Fatalf("h2 front answered over %s", resp.Proto)
				}
				b, _ := io.ReadAll(resp.Body)
				return string(b)
			},
		}
		purge := func(q string) {
			t.Helper()
			req, _ := http.NewRequest("POST", "http://"+n.AdminAddr()+"/purge?"+q, nil)
			req.Header.Set("Authorization", "Bearer "+token)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				t.Fatalf("purge %s: %d %s", q, resp.StatusCode, b)
			}
		}
		for _, c := range []struct{ path, purge string }{
			{"/hard", "url=http://a.test/hard"},
			{"/soft", "url=https://A.TEST:443/soft&soft=1"},
			{"/pre/x", "prefix=https://a.test/pre/"},
			{"/path/x", "prefix=/path/"},
			{"/tagged", "tag=grp-tagged"},
		} {
			version.Store(1)
			for name, f := range fronts {
				for range 3 { // fill, then hits on the same connection
					if got := f(c.path); got != "v1 "+c.path {
						t.Fatalf("%s %s before the purge: %q", name, c.path, got)
					}
				}
			}
			n.Proxy().Wait()
			version.Store(2)
			purge(c.purge)
			for name, f := range fronts {
				if got := f(c.path); got != "v2 "+c.path {
					t.Errorf("%s: after purge %s, %s answered %q, want the origin's new version", server, c.purge, name, got)
				}
			}
		}
	}
}
