package node

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"net/textproto"
	"strings"
	"testing"
	"time"

	"github.com/andybalholm/brotli"
)

// TestS39HintsOnAnEncodedMissAndPass: a miss (stored, encoded br as it is
// served) and a pass (no-store, encoded as it streams), each after the
// origin's 103: the client gets the 103 with the Link alone, then an
// answer whose coding fields (Content-Encoding, Vary) and length agree
// with its body, which decodes to the page, and no Link.
func TestS39HintsOnAnEncodedMissAndPass(t *testing.T) {
	page := strings.Repeat("<p>early hints and brotli</p>\n", 200)
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Link", "</c.css>; rel=preload; as=style")
		w.WriteHeader(http.StatusEarlyHints)
		w.Header().Del("Link")
		w.Header().Set("Content-Type", "text/html")
		if r.URL.Path == "/pass" {
			w.Header().Set("Cache-Control", "no-store")
		} else {
			w.Header().Set("Cache-Control", "max-age=600")
		}
		_, _ = io.WriteString(w, page)
	}))
	defer origin.Close()
	n := startNode(t, origin.URL, "")
	for _, path := range []string{"/miss", "/pass"} {
		hints := 0
		ctx := httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{
			Got1xxResponse: func(code int, h textproto.MIMEHeader) error {
				if code == http.StatusEarlyHints {
					hints++
					if len(h) != 1 || h.Get("Link") == "" {
						t.Errorf("%s: a 103 with %v", path, h)
					}
				}
				return nil
			},
		})
		req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+n.PublicAddr()+path, nil)
		req.Host = "x"
		req.Header.Set("Accept-Encoding", "br")
		c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableCompression: true}}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || hints != 1 || resp.Header.Get("Link") != "" || resp.Header.Get("Content-Encoding") != "br" ||
			!strings.Contains(strings.ToLower(strings.Join(resp.Header.Values("Vary"), ",")), "accept-encoding") {
			t.Fatalf("%s: %d, %d 103s, header %v", path, resp.StatusCode, hints, resp.Header)
		}
		if cl := resp.ContentLength; cl >= 0 && cl != int64(len(raw)) {
			t.Fatalf("%s: Content-Length %d, body %d bytes", path, cl, len(raw))
		}
		body, err := io.ReadAll(brotli.NewReader(strings.NewReader(string(raw))))
		if err != nil || string(body) != page {
			t.Fatalf("%s: the br body does not decode to the page (%d bytes, %v)", path, len(body), err)
		}
	}
}
