package proxy

import (
	"context"
	"io"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"testing"
	"time"
)

// TestS39HintDuringAStreamedUpload: a pass whose upload streams to the
// origin (request buffering off, chunked, no Expect) gets the origin's
// 103 while the client is still sending (the client sends the rest only
// once the 103 is in: full duplex on HTTP/1.1), then the final answer
// with the whole body echoed and no Link. Under -race: the writer
// goroutine's 103 and the transport reading the client's body run at
// once on one connection.
func TestS39HintDuringAStreamedUpload(t *testing.T) {
	up := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Link", "</up.css>; rel=preload")
		w.WriteHeader(http.StatusEarlyHints)
		w.Header().Del("Link")
		b, _ := io.ReadAll(r.Body)
		w.Header().Set("Cache-Control", "no-store")
		_, _ = io.WriteString(w, "got "+string(b))
	})
	_, front := s38HintsProxy(t, up, func(c *Config) { c.RequestBuffering = false }, false)
	hinted := make(chan struct{})
	ctx := httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{
		Got1xxResponse: func(code int, h textproto.MIMEHeader) error {
			if code == http.StatusEarlyHints && h.Get("Link") != "" {
				close(hinted)
			}
			return nil
		},
	})
	pr, pw := io.Pipe()
	go func() {
		_, _ = io.WriteString(pw, "first ")
		select {
		case <-hinted:
			_, _ = io.WriteString(pw, "second")
		case <-time.After(3 * time.Second):
			_, _ = io.WriteString(pw, "NO-HINT")
		}
		_ = pw.Close()
	}()
	req, _ := http.NewRequestWithContext(ctx, "POST", front.URL+"/up", pr)
	c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableCompression: true}}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(b) != "got first second" || resp.Header.Get("Link") != "" {
		t.Fatalf("streamed upload with a 103 mid-way: %d %q Link %q; want 200 \"got first second\" and no Link", resp.StatusCode, b, resp.Header.Get("Link"))
	}
}
