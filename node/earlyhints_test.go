package node

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"strings"
	"testing"
	"time"
)

// TestEarlyHintsReachTheClientOnEveryProtocol: an origin's 103 goes on
// to the client whose miss went to it over HTTP/1.1, HTTPS and HTTP/2 on
// edge's HTTP/2 server (not on net/http's, tuning.http2_server: go), with
// its Link and nothing else, and the final answer keeps the fields the
// node sets (HSTS); a hit gets no 103.
func TestEarlyHintsReachTheClientOnEveryProtocol(t *testing.T) {
	origin, _ := s38HintingOrigin(t) // a 103 with a Link and a Set-Cookie, then the page
	cp, kp := writePair(t, t.TempDir(), "a", []string{"a.test"}, 1)
	nodeFor := func(server string) *Node {
		return startNode(t, origin.URL, "tls: {listen: '"+freeAddr(t)+"', cert_file: '"+cp+"', key_file: '"+kp+"', hsts: 'max-age=300'}\n"+
			"tuning: {http2_server: "+server+"}\n")
	}
	edgeH2, goH2 := nodeFor("edge"), nodeFor("go")
	h1 := &http.Client{Timeout: 10 * time.Second}
	h2 := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		TLSClientConfig:   &tls.Config{InsecureSkipVerify: true, ServerName: "a.test"}, //nolint:gosec // a test certificate
		ForceAttemptHTTP2: true, DisableCompression: true,
	}}
	h1tls := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		TLSClientConfig:    &tls.Config{InsecureSkipVerify: true, ServerName: "a.test", NextProtos: []string{"http/1.1"}}, //nolint:gosec // a test certificate
		DisableCompression: true,
	}}
	ask := func(c *http.Client, url string, wantProto int, wantHSTS bool) []textproto.MIMEHeader {
		t.Helper()
		var hints []textproto.MIMEHeader
		ctx := httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{
			Got1xxResponse: func(code int, h textproto.MIMEHeader) error {
				if code == http.StatusEarlyHints {
					hints = append(hints, h)
				}
				return nil
			},
		})
		req, _ := http.NewRequestWithContext(ctx, "GET", url, nil)
		req.Host = "a.test"
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || resp.ProtoMajor != wantProto || resp.Header.Get("Link") != "" || resp.Header.Get("Set-Cookie") != "" {
			t.Fatalf("%s: %d over HTTP/%d, Link %q, Set-Cookie %q (%q)", url, resp.StatusCode, resp.ProtoMajor, resp.Header.Get("Link"), resp.Header.Get("Set-Cookie"), b)
		}
		if wantHSTS && resp.Header.Get("Strict-Transport-Security") == "" {
			t.Errorf("%s: the final answer lost the node's HSTS field to the 103 before it", url)
		}
		for _, h := range hints {
			if len(h) != 1 || h.Get("Link") == "" {
				t.Errorf("%s: a 103 with %v; only the origin's Link goes on", url, h)
			}
		}
		return hints
	}
	for i, c := range []struct {
		name  string
		n     *Node
		cl    *http.Client
		tls   bool
		proto int
	}{
		{"HTTP/1.1", edgeH2, h1, false, 1},
		{"HTTPS/1.1", edgeH2, h1tls, true, 1},
		{"HTTP/2, edge's server", edgeH2, h2, true, 2},
		{"HTTP/2, net/http's server", goH2, h2, true, 2},
	} {
		want := 1
		if c.n == goH2 && c.proto == 2 {
			want = 0 // not relayed on net/http's HTTP/2 server (proxy/earlyhints.go)
		}
		url := "http://" + c.n.pubLn.Addr().String()
		if c.tls {
			url = "https://" + c.n.tls.ln.Addr().String()
		}
		url += fmt.Sprintf("/page%d", i)
		if hints := ask(c.cl, url, c.proto, c.tls); len(hints) != want {
			t.Errorf("%s miss: %d 103s, want %d", c.name, len(hints), want)
		}
		if hints := ask(c.cl, url, c.proto, c.tls); len(hints) != 0 {
			t.Errorf("%s hit: %d 103s, want none", c.name, len(hints))
		}
	}
	// The status page counts them: three relayed by edgeH2, one dropped
	// by goH2 (net/http's HTTP/2 server).
	for _, c := range []struct {
		n    *Node
		want string
	}{{edgeH2, "answers relayed to their client 3, dropped 0"}, {goH2, "answers relayed to their client 0, dropped 1"}} {
		resp, err := http.Get("http://" + c.n.AdminAddr() + "/status")
		if err != nil {
			t.Fatal(err)
		}
		page, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if !strings.Contains(string(page), "103 (Early Hints) "+c.want) {
			t.Logf("%s", page)
			t.Errorf("the status page does not say %q", c.want)
		}
	}
}
