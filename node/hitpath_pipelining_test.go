package node

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// startNode runs a node in front of origin with extra YAML config.
func startNode(t *testing.T, origin, extra string) *Node {
	t.Helper()
	return startNodeYAML(t, "origin: {url: '"+origin+"'}\nlisten: '"+freeAddr(t)+"'\nadmin: {listen: '"+freeAddr(t)+"'}\n"+extra)
}

func reviewGet(t *testing.T, addr, path string, hdr ...string) *http.Response {
	t.Helper()
	req, _ := http.NewRequest("GET", "http://"+addr+path, nil)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	client := &http.Client{Transport: &http.Transport{DisableCompression: true}, Timeout: 10 * time.Second}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	resp.Body = io.NopCloser(strings.NewReader(string(b)))
	return resp
}

func reviewOrigin(t *testing.T) *httptest.Server {
	o := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=600")
		switch r.URL.Path {
		case "/slow":
			time.Sleep(300 * time.Millisecond)
			_, _ = io.WriteString(w, "the slow page")
		case "/big":
			w.Header().Set("Content-Type", "application/octet-stream")
			_, _ = io.WriteString(w, strings.Repeat("b", 30000))
		case "/html":
			w.Header().Set("Content-Type", "text/html")
			_, _ = io.WriteString(w, strings.Repeat("<p>hello</p>", 400))
		default:
			_, _ = io.WriteString(w, "public")
		}
	}))
	t.Cleanup(o.Close)
	return o
}

func hitPathModes(t *testing.T, f func(t *testing.T, on bool)) {
	for _, on := range []bool{false, true} {
		name := "hit_path off (ServeHTTP)"
		if on {
			name = "hit_path on"
		}
		t.Run(name, func(t *testing.T) { f(t, on) })
	}
}

func hitPathYAML(on bool) string {
	if on {
		return "tuning: {hit_path: true}\n"
	}
	return "tuning: {hit_path: false}\n"
}

// TestPipelinedMissThenHitWithHalfClose: a miss and a hit pipelined,
// then the client half-closes. The miss's answer must be whole, as it is
// without the hit path.
func TestPipelinedMissThenHitWithHalfClose(t *testing.T) {
	hitPathModes(t, func(t *testing.T, on bool) {
		n := startNode(t, reviewOrigin(t).URL, hitPathYAML(on))
		reviewGet(t, n.PublicAddr(), "/public")
		reviewGet(t, n.PublicAddr(), "/public")
		c, err := net.Dial("tcp", n.PublicAddr())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		req := func(p string) string { return "GET " + p + " HTTP/1.1\r\nHost: " + n.PublicAddr() + "\r\n\r\n" }
		if _, err := io.WriteString(c, req("/slow")); err != nil {
			t.Fatal(err)
		}
		for end := time.Now().Add(10 * time.Second); inflightGauge(t, n) < 1; time.Sleep(time.Millisecond) {
			if time.Now().After(end) {
				t.Fatal("the miss never went in flight")
			}
		}
		if _, err := io.WriteString(c, req("/public")); err != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
		_ = c.(*net.TCPConn).CloseWrite()
		br := bufio.NewReader(c)
		for i, want := range []string{"the slow page", "public"} {
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatalf("response %d: %v", i+1, err)
			}
			b, err := io.ReadAll(resp.Body)
			if err != nil || string(b) != want {
				t.Fatalf("response %d: %d %q (%v), want %q", i+1, resp.StatusCode, b, err, want)
			}
		}
	})
}

// TestPerClientLimitHoldsDuringBlockedWrite: with
// limits.max_inflight_per_client 1, a client whose connection is stuck
// writing a hit (it never reads) holds its one slot under ServeHTTP, so
// its next request elsewhere gets 429. The hit path releases the slot
// before its write, which can block for write_timeout with a 30 KiB copy
// of the body held per connection, outside the buffer budget.
func TestPerClientLimitHoldsDuringBlockedWrite(t *testing.T) {
	hitPathModes(t, func(t *testing.T, on bool) {
		n := startNode(t, reviewOrigin(t).URL, hitPathYAML(on)+"limits: {max_inflight_per_client: 1}\n")
		reviewGet(t, n.PublicAddr(), "/big")
		if r := reviewGet(t, n.PublicAddr(), "/big"); r.StatusCode != 200 {
			t.Fatalf("warm-up %d", r.StatusCode)
		}
		stuckClient(t, n.PublicAddr())
		for deadline := time.Now().Add(8 * time.Second); time.Now().Before(deadline); {
			// Let A's answers fill the socket buffers first: only a write
			// that is stuck is asked about, not one being built.
			time.Sleep(300 * time.Millisecond)
			if r := reviewGet(t, n.PublicAddr(), "/big"); r.StatusCode == http.StatusTooManyRequests {
				return
			}
		}
		t.Fatal("a client stuck in a write of a hit never counted against max_inflight_per_client")
	})
}

// TestStripHeadersAcceptEncoding: forwarding.strip_headers removes a
// field from the request before the cache reasons about it (sanitize), so
// ServeHTTP serves identity when Accept-Encoding is stripped; the hit path
// ignores strip_headers and serves the compressed form.
func TestStripHeadersAcceptEncoding(t *testing.T) {
	hitPathModes(t, func(t *testing.T, on bool) {
		n := startNode(t, reviewOrigin(t).URL, hitPathYAML(on)+"forwarding: {strip_headers: 'X-Original-Url,X-Rewrite-Url,Accept-Encoding'}\n")
		reviewGet(t, n.PublicAddr(), "/html")
		reviewGet(t, n.PublicAddr(), "/html")
		r := reviewGet(t, n.PublicAddr(), "/html", "Accept-Encoding", "gzip")
		if ce := r.Header.Get("Content-Encoding"); ce != "" {
			t.Fatalf("Content-Encoding %q for a request whose Accept-Encoding the operator strips (Cache-Status %q)", ce, r.Header.Get("Cache-Status"))
		}
	})
}

// stuckClient pipelines requests for /big on one connection and never
// reads the answers: the node's write to it blocks.
func stuckClient(t *testing.T, addr string) {
	t.Helper()
	a, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Close() })
	_ = a.(*net.TCPConn).SetReadBuffer(4096)
	go func() {
		req := "GET /big HTTP/1.1\r\nHost: " + addr + "\r\n\r\n"
		for range 2000 { // 60 MB of answers, never read
			if _, err := io.WriteString(a, req); err != nil {
				return
			}
		}
	}()
}
