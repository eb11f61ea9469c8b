package proxy

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestS9SlowBodyHeaderArrivesEarly: an origin sends its header and then
// holds its body for a second. The edge's clients (the fill's leader and
// a follower that joined it, with and without a live encoder, stored and
// too large to store) must get their response header while the body
// waits upstream, not with the first body bytes. Afterwards no encoder
// or fill byte stays charged to the buffer budget.
func TestS9SlowBodyHeaderArrivesEarly(t *testing.T) {
	for _, tc := range []struct {
		name, ae string
		tooLarge bool
	}{
		{"identity", "", false},
		{"gzip", "gzip", false},
		{"identity-toolarge", "", true},
		{"gzip-toolarge", "gzip", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body := page(200000)
			release := make(chan struct{})
			h, _ := handlerProxy(t, func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Cache-Control", "max-age=600")
				w.Header().Set("Content-Type", "text/html")
				if !tc.tooLarge {
					w.Header().Set("Content-Length", "200000")
				} // else chunked: found too large as it streams, a trimming fill
				w.WriteHeader(200)
				w.(http.Flusher).Flush()
				<-release
				_, _ = io.WriteString(w, body)
			}, func(c *Config) {
				withCompression(c)
				if tc.tooLarge {
					c.MaxObjectBytes = 4096
					c.SliceBytes = 0
				}
			})
			front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Alt-Svc", `h3=":443"`)
				h.ServeHTTP(w, r)
			}))
			defer front.Close()
			client := &http.Client{Transport: &http.Transport{DisableCompression: true}}
			defer client.CloseIdleConnections()

			type got struct {
				hdrAt time.Duration
				resp  *http.Response
				body  string
				err   error
			}
			start := time.Now()
			res := make([]got, 2)
			var wg sync.WaitGroup
			for i := range 2 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					if i == 1 {
						time.Sleep(100 * time.Millisecond) // a follower
					}
					ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
					defer cancel()
					req, _ := http.NewRequestWithContext(ctx, "GET", front.URL+"/slow.html", nil)
					if tc.ae != "" {
						req.Header.Set("Accept-Encoding", tc.ae)
					}
					resp, err := client.Do(req)
					if err != nil {
						res[i].err = err
						return
					}
					res[i].hdrAt = time.Since(start)
					res[i].resp = resp
					b, err := io.ReadAll(resp.Body)
					resp.Body.Close()
					res[i].body, res[i].err = string(b), err
				}()
			}
			time.Sleep(800 * time.Millisecond)
			close(release)
			wg.Wait()
			for i, g := range res {
				if g.err != nil {
					t.Errorf("client %d: %v", i, g.err)
					continue
				}
				t.Logf("client %d: header after %v, %d CE %q Cache-Status %q Alt-Svc %q len %d", i, g.hdrAt, g.resp.StatusCode,
					g.resp.Header.Get("Content-Encoding"), g.resp.Header.Get("Cache-Status"), g.resp.Header.Get("Alt-Svc"), len(g.body))
				if g.resp.Header.Get("Alt-Svc") == "" {
					t.Errorf("client %d: the front's Alt-Svc was lost", i)
				}
				if i == 0 && g.hdrAt > 600*time.Millisecond {
					t.Errorf("client %d (leader): header only after %v, when the body came: the lazy header was not flushed while the fill waited", i, g.hdrAt)
				}
			}
			h.Wait()
			time.Sleep(50 * time.Millisecond)
			if b := h.buffered.Load(); b != 0 {
				t.Errorf("buffer budget still charged with %d bytes after every answer ended", b)
			}
			_ = strings.TrimSpace
		})
	}
}
