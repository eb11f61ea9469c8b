package node

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/edgecache/edge/internal/promtext"
)

// s24lOrigin answers with the status (?s=NNN), Content-Encoding (?ce=),
// Vary (?vary=) and Cache-Control (?cc=) the request names: what an
// origin an attacker controls (or a page it can steer) returns.
func s24lOrigin(t *testing.T) *httptest.Server {
	t.Helper()
	o := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		if ce := q.Get("ce"); ce != "" {
			w.Header().Set("Content-Encoding", ce)
		}
		if v := q.Get("vary"); v != "" {
			w.Header().Set("Vary", v)
		}
		cc := "max-age=600"
		if v := q.Get("cc"); v != "" {
			cc = v
		}
		w.Header().Set("Cache-Control", cc)
		code := 200
		if s := q.Get("s"); s != "" {
			code, _ = strconv.Atoi(s)
		}
		if code >= 100 && code < 200 && code != 101 {
			w.WriteHeader(code) // an informational answer, then the final one
			code = 200
		}
		w.WriteHeader(code)
		_, _ = io.WriteString(w, "body "+r.URL.RequestURI())
	}))
	t.Cleanup(o.Close)
	return o
}

// s24lScrape reads the node's /metrics with the project's own parser.
func s24lScrape(t *testing.T, adm string) map[string]float64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	m, err := promtext.Scrape(ctx, "http://"+adm+"/metrics")
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// s24lEdgeSeries are the edge_ series of a scrape.
func s24lEdgeSeries(m map[string]float64) map[string]bool {
	out := map[string]bool{}
	for k := range m {
		if strings.HasPrefix(k, "edge_") {
			out[k] = true
		}
	}
	return out
}

// s24lNew lists the series of after that before lacks, sorted.
func s24lNew(before, after map[string]bool) []string {
	var out []string
	for k := range after {
		if !before[k] {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return out
}

// s24lSum sums every series of name (any labels).
func s24lSum(m map[string]float64, name string) float64 {
	var s float64
	for k, v := range m {
		if k == name || strings.HasPrefix(k, name+"{") {
			s += v
		}
	}
	return s
}

// s24lRaw writes head on a new connection (optionally from a chosen local
// 127.x address) and reads one answer; it returns the status (0 when the
// connection ended without one).
func s24lRaw(t *testing.T, addr, head string) int {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, head); err != nil {
		return 0
	}
	b, _ := io.ReadAll(c)
	s := string(b)
	// Skip informational answers.
	for strings.HasPrefix(s, "HTTP/1.1 1") {
		i := strings.Index(s, "\r\n\r\n")
		if i < 0 {
			break
		}
		s = s[i+4:]
	}
	if len(s) < 12 || !strings.HasPrefix(s, "HTTP/1.1 ") {
		return 0
	}
	code, _ := strconv.Atoi(s[9:12])
	return code
}

// s24lTraffic sends one round of hostile inputs, each value tagged with
// tag so that a label holding it can be recognised. It returns how many
// requests reached the node with an answer, by status.
func s24lTraffic(t *testing.T, pub, tag string, n int) map[int]int {
	t.Helper()
	got := map[int]int{}
	ask := func(head string) { got[s24lRaw(t, pub, head)]++ }
	methods := []string{"GET", "HEAD", "POST", "PURGE", "BAN", "X" + strings.ToUpper(tag), "OPTIONS", "DELETE", "PROPFIND"}
	for i := 0; i < n; i++ {
		v := fmt.Sprintf("%s%d", tag, i)
		hosts := []string{
			"shop.test", "SHOP.TEST.", "shop.test:" + strconv.Itoa(1000+i), "unknown-" + v + ".test", "xn--" + v + ".test",
			"[::" + strconv.Itoa(i%9+1) + "]", "shop.test:x" + v, "[" + v + "]", "münchen-" + v + ".test",
		}
		for _, h := range hosts {
			ask("GET /p/" + v + " HTTP/1.1\r\nHost: " + h + "\r\nConnection: close\r\n\r\n")
		}
		m := methods[i%len(methods)]
		body := ""
		if m == "POST" {
			body = "Content-Length: 2\r\n\r\nhi"
		} else {
			body = "\r\n"
		}
		ask(m + " /m/" + v + " HTTP/1.1\r\nHost: shop.test\r\nConnection: close\r\n" + body)
		// Status codes and codings the origin returns for this request.
		for _, s := range []string{"103", "199", "203", "299", "420", "451", "599", "600", "799", "999"} {
			ask("GET /s/" + v + "?s=" + s + "&ce=" + v + " HTTP/1.1\r\nHost: shop.test\r\nAccept-Encoding: " + v + ", br;q=0.5, zstd, x-" + v + "\r\nConnection: close\r\n\r\n")
		}
		ask("GET /v/" + v + "?vary=X-" + v + " HTTP/1.1\r\nHost: shop.test\r\nX-" + v + ": 1\r\nX-Forwarded-For: 10.9." + strconv.Itoa(i%250) + ".1, " + v + "\r\nX-Real-IP: " + v + "\r\nForwarded: for=" + v + "\r\nConnection: close\r\n\r\n")
		ask("GET /rule/" + v + "?utm_" + v + "=1 HTTP/1.1\r\nHost: shop.test\r\nCache-Control: no-cache\r\nConnection: close\r\n\r\n")
		ask("GET /s/r" + v + "?s=304 HTTP/1.1\r\nHost: shop.test\r\nIf-None-Match: \"" + v + "\"\r\nRange: bytes=0-1\r\nConnection: close\r\n\r\n")
	}
	return got
}

// s24lLabelsWith lists series one of whose label values holds tag.
func s24lLabelsWith(series map[string]bool, tag string) []string {
	var out []string
	for k := range series {
		if i := strings.IndexByte(k, '{'); i >= 0 && strings.Contains(strings.ToLower(k[i:]), strings.ToLower(tag)) {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return out
}

// s24lStatusJSON reads /status.json.
func s24lStatusJSON(t *testing.T, adm string) map[string]any {
	t.Helper()
	_, body := getBody(t, "http://"+adm+"/status.json")
	var m map[string]any
	if err := json.Unmarshal([]byte(body), &m); err != nil {
		t.Fatal(err)
	}
	return m
}
