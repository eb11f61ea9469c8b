package node

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"
)

// s8rAsk writes head on a new connection and reads one response to method.
func s8rAsk(t *testing.T, addr, method, head string) (*http.Response, []byte) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, head); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: method})
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s body: %v", method, err)
	}
	return resp, b
}

func s8rHTML(n int) string {
	var b strings.Builder
	for i := 0; b.Len() < n; i++ {
		b.WriteString("<li>row " + strconv.Itoa(i) + " of a long table of things</li>\n")
	}
	return b.String()[:n]
}

// TestS8RHitPathAgreesWithNetHTTP: for GET and HEAD in identity, gzip and
// br, a fresh hit answered by the HTTP/1.1 hit path and the same request
// pushed onto net/http's path (a request Cache-Control that does not
// change a fresh hit makes the hit path decline) give the same status,
// body-describing fields and body; HEAD's Content-Length equals the GET's
// body length. Held if it passes.
func TestS8RHitPathAgreesWithNetHTTP(t *testing.T) {
	body := s8rHTML(30000)
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=600")
		w.Header().Set("Content-Type", "text/html")
		w.Header().Set("ETag", `"v1"`)
		w.Header().Set("Last-Modified", "Mon, 05 Jan 2026 00:00:00 GMT")
		_, _ = io.WriteString(w, body)
	}))
	defer origin.Close()
	n := startNode(t, origin.URL, "")
	addr := n.PublicAddr()
	req := func(method, ae, extra string) string {
		s := method + " /page HTTP/1.1\r\nHost: x\r\n"
		if ae != "" {
			s += "Accept-Encoding: " + ae + "\r\n"
		}
		return s + extra + "Connection: close\r\n\r\n"
	}
	// Fill and make the stored forms.
	for range 3 {
		for _, ae := range []string{"", "gzip", "br"} {
			s8rAsk(t, addr, "GET", req("GET", ae, ""))
		}
		time.Sleep(100 * time.Millisecond)
	}
	fields := []string{"Content-Length", "Content-Encoding", "Etag", "Vary", "Content-Type", "Cache-Control", "Last-Modified", "Accept-Ranges", "Cache-Status"}
	for _, ae := range []string{"", "gzip", "br", "gzip;q=0, br;q=0.5"} {
		before := n.hitM.Stats().Answered
		fastG, fastGB := s8rAsk(t, addr, "GET", req("GET", ae, ""))
		fastH, fastHB := s8rAsk(t, addr, "HEAD", req("HEAD", ae, ""))
		if got := n.hitM.Stats().Answered - before; got != 2 {
			t.Fatalf("AE %q: the hit path answered %d of 2 plain requests", ae, got)
		}
		before = n.hitM.Stats().Answered
		slowG, slowGB := s8rAsk(t, addr, "GET", req("GET", ae, "Cache-Control: max-stale=1\r\n"))
		slowH, slowHB := s8rAsk(t, addr, "HEAD", req("HEAD", ae, "Cache-Control: max-stale=1\r\n"))
		if got := n.hitM.Stats().Answered - before; got != 0 {
			t.Fatalf("AE %q: the hit path answered a request with Cache-Control", ae)
		}
		for _, f := range fields {
			if fastG.Header.Get(f) != slowG.Header.Get(f) || fastH.Header.Get(f) != slowH.Header.Get(f) {
				t.Errorf("AE %q %s: fast GET %q HEAD %q, net/http GET %q HEAD %q", ae, f,
					fastG.Header.Get(f), fastH.Header.Get(f), slowG.Header.Get(f), slowH.Header.Get(f))
			}
			if f != "Cache-Status" && fastG.Header.Get(f) != fastH.Header.Get(f) {
				t.Errorf("AE %q %s: GET %q vs HEAD %q", ae, f, fastG.Header.Get(f), fastH.Header.Get(f))
			}
		}
		if fastG.StatusCode != 200 || slowG.StatusCode != 200 || string(fastGB) != string(slowGB) || len(fastHB)+len(slowHB) != 0 {
			t.Errorf("AE %q: fast %d (%d bytes) net/http %d (%d bytes)", ae, fastG.StatusCode, len(fastGB), slowG.StatusCode, len(slowGB))
		}
		if cl := fastH.Header.Get("Content-Length"); cl != strconv.Itoa(len(fastGB)) {
			t.Errorf("AE %q: HEAD Content-Length %q, GET sends %d bytes", ae, cl, len(fastGB))
		}
	}
	// HTTP/1.0 plain GET and HEAD through the hit loop.
	g10, b10 := s8rAsk(t, addr, "GET", "GET /page HTTP/1.0\r\nHost: x\r\nAccept-Encoding: gzip\r\n\r\n")
	h10, _ := s8rAsk(t, addr, "HEAD", "HEAD /page HTTP/1.0\r\nHost: x\r\nAccept-Encoding: gzip\r\n\r\n")
	if g10.Header.Get("Content-Length") != strconv.Itoa(len(b10)) || h10.Header.Get("Content-Length") != g10.Header.Get("Content-Length") {
		t.Errorf("HTTP/1.0: GET CL %q for %d bytes, HEAD CL %q", g10.Header.Get("Content-Length"), len(b10), h10.Header.Get("Content-Length"))
	}
}

// TestS8RNodeRangeAndConditionalsOnForms: through a real node, Range and
// conditionals with Accept-Encoding go to net/http's path and address the
// selected form. Held if it passes.
func TestS8RNodeRangeAndConditionalsOnForms(t *testing.T) {
	body := s8rHTML(30000)
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=600")
		w.Header().Set("Content-Type", "text/html")
		w.Header().Set("ETag", `"v1"`)
		_, _ = io.WriteString(w, body)
	}))
	defer origin.Close()
	n := startNode(t, origin.URL, "")
	addr := n.PublicAddr()
	for range 3 {
		s8rAsk(t, addr, "GET", "GET /p HTTP/1.1\r\nHost: x\r\nAccept-Encoding: gzip\r\nConnection: close\r\n\r\n")
		time.Sleep(100 * time.Millisecond)
	}
	full, fb := s8rAsk(t, addr, "GET", "GET /p HTTP/1.1\r\nHost: x\r\nAccept-Encoding: gzip\r\nConnection: close\r\n\r\n")
	if full.Header.Get("Etag") != `"v1-gzip6"` {
		t.Fatalf("stored gzip form not served: %q", full.Header.Get("Etag"))
	}
	r, rb := s8rAsk(t, addr, "GET", "GET /p HTTP/1.1\r\nHost: x\r\nAccept-Encoding: gzip\r\nRange: bytes=10-29\r\nConnection: close\r\n\r\n")
	if r.StatusCode != 206 || string(rb) != string(fb[10:30]) || r.Header.Get("Content-Encoding") != "gzip" {
		t.Errorf("Range on gzip: %d CE %q", r.StatusCode, r.Header.Get("Content-Encoding"))
	}
	c, _ := s8rAsk(t, addr, "GET", "GET /p HTTP/1.1\r\nHost: x\r\nAccept-Encoding: gzip\r\nIf-None-Match: \"v1\"\r\nConnection: close\r\n\r\n")
	if c.StatusCode != 200 {
		t.Errorf("identity tag validated the gzip form: %d", c.StatusCode)
	}
	c, _ = s8rAsk(t, addr, "HEAD", "HEAD /p HTTP/1.1\r\nHost: x\r\nAccept-Encoding: gzip\r\nIf-None-Match: \"v1-gzip6\"\r\nConnection: close\r\n\r\n")
	if c.StatusCode != 304 || c.Header.Get("Etag") != `"v1-gzip6"` {
		t.Errorf("HEAD INM gzip tag: %d %q", c.StatusCode, c.Header.Get("Etag"))
	}
}
