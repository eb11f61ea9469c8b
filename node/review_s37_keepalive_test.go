package node

// Hostile review s37 of closingWriter (8236ca7) through a real node:
// uploads the edge reads to their end must keep their keep-alive
// connection (plain and TLS, HTTP/1.1 and HTTP/2).

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"testing"
	"time"
)

func TestS37NodeSequentialUploadsReuseTheConnection(t *testing.T) {
	o := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := io.Copy(io.Discard, r.Body)
		w.Header().Set("Cache-Control", "no-store")
		fmt.Fprintf(w, "%s %d", r.Method, n)
	}))
	t.Cleanup(o.Close)
	for _, limits := range []string{"", "limits: {spool_bytes: 0}\n"} {
		plain, tlsAddr, _ := startS36Node(t, o.URL, limits, true)
		for _, tc := range []struct {
			name string
			url  string
			h2   bool
		}{{"plain", "http://" + plain, false}, {"tls", "https://" + tlsAddr, false}, {"h2", "https://" + tlsAddr, true}} {
			tr := &http.Transport{MaxIdleConnsPerHost: 1, MaxConnsPerHost: 1, ForceAttemptHTTP2: tc.h2,
				TLSClientConfig: &tls.Config{InsecureSkipVerify: true, ServerName: "example.test"}}
			if !tc.h2 {
				tr.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
			}
			client := &http.Client{Transport: tr, Timeout: 10 * time.Second}
			for _, size := range []int{1 << 10, 100 << 10, 1 << 20} {
				body := bytes.Repeat([]byte("x"), size)
				n := 50
				if size == 1<<20 {
					n = 20
				}
				var closes, notReused, conns int
				for i := range n {
					var reused bool
					trace := &httptrace.ClientTrace{GotConn: func(ci httptrace.GotConnInfo) {
						reused = ci.Reused
						if !ci.Reused {
							conns++
						}
					}}
					req, _ := http.NewRequestWithContext(httptrace.WithClientTrace(context.Background(), trace), "POST", tc.url+"/up", bytes.NewReader(body))
					req.Host = "example.test"
					resp, err := client.Do(req)
					if err != nil {
						t.Fatalf("%q %s size %d #%d: %v", limits, tc.name, size, i, err)
					}
					b, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					if want := fmt.Sprintf("POST %d", size); string(b) != want {
						t.Fatalf("%q %s size %d #%d: got %d %q want %q", limits, tc.name, size, i, resp.StatusCode, b, want)
					}
					if tc.h2 != (resp.ProtoMajor == 2) {
						t.Fatalf("%s: %s", tc.name, resp.Proto)
					}
					if resp.Close || resp.Header.Get("Connection") != "" {
						closes++
					}
					if i > 0 && !reused {
						notReused++
					}
				}
				if closes > 0 || notReused > 0 {
					t.Errorf("%q %s size %d: %d of %d answers closed the connection, %d requests went on a new one", limits, tc.name, size, closes, n, notReused)
				}
			}
			tr.CloseIdleConnections()
		}
	}
}
