package proxy

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// s35Origin serves a mix: cacheable pages, slow pages, no-store pages,
// errors, uploads and large bodies.
func s35Origin(w http.ResponseWriter, r *http.Request) {
	p := r.URL.Path
	if r.Body != nil {
		_, _ = io.Copy(io.Discard, r.Body)
	}
	switch {
	case strings.HasPrefix(p, "/slow"):
		select {
		case <-time.After(time.Duration(rand.IntN(150)) * time.Millisecond):
		case <-r.Context().Done():
			return
		}
	case strings.HasPrefix(p, "/err"):
		w.WriteHeader(http.StatusInternalServerError)
		return
	case strings.HasPrefix(p, "/private"):
		w.Header().Set("Cache-Control", "no-store")
		_, _ = w.Write([]byte("private"))
		return
	}
	w.Header().Set("Cache-Control", "max-age=600")
	n := 100
	if strings.HasPrefix(p, "/big") {
		n = 256 << 10
	}
	for i := 0; i < n; i += 4096 {
		_, _ = w.Write(bytes.Repeat([]byte("b"), min(4096, n-i)))
		if f, ok := w.(http.Flusher); ok && strings.HasPrefix(p, "/big") {
			f.Flush()
		}
	}
}

// TestS35ClientCountsReturnToEmpty: many requests of every kind over
// HTTP/1.1 and HTTP/2, clients leaving at random moments, the bound turned
// on and off by reloads while they run: when everything has ended, the
// limiter's counts are empty (held unless it fails).
func TestS35ClientCountsReturnToEmpty(t *testing.T) {
	for _, h2 := range []bool{false, true} {
		t.Run(fmt.Sprintf("h2=%v", h2), func(t *testing.T) {
			h, _ := handlerProxy(t, s35Origin, func(c *Config) {
				c.MaxInflightPerClient = 3
				c.CoalesceTimeout = 5 * time.Second
			})
			front := httptest.NewUnstartedServer(h)
			if h2 {
				front.EnableHTTP2 = true
				front.StartTLS()
			} else {
				front.Start()
			}
			client := front.Client()
			if h2 {
				client.Transport.(*http.Transport).TLSClientConfig = &tls.Config{InsecureSkipVerify: true}
				client.Transport.(*http.Transport).ForceAttemptHTTP2 = true
			}
			stopReload := make(chan struct{})
			var reloads sync.WaitGroup
			reloads.Go(func() {
				for i := 0; ; i++ {
					select {
					case <-stopReload:
						h.SetLimits(DefaultConfig().MaxInflight, 3)
						return
					case <-time.After(7 * time.Millisecond):
					}
					h.SetLimits(DefaultConfig().MaxInflight, []int{0, 3, 1}[i%3])
				}
			})
			paths := []string{"/hit", "/slow/a", "/slow/b", "/private", "/err", "/big", "/big2", "/slow/c"}
			var wg sync.WaitGroup
			codes := make(map[int]int)
			var mu sync.Mutex
			for i := range 300 {
				wg.Go(func() {
					ctx, cancel := context.WithTimeout(context.Background(), time.Duration(rand.IntN(200))*time.Millisecond)
					defer cancel()
					method := []string{"GET", "GET", "HEAD", "POST"}[i%4]
					p := paths[rand.IntN(len(paths))]
					if i%7 == 0 {
						p = fmt.Sprintf("/slow/miss%d", i)
					}
					var body io.Reader
					if method == "POST" {
						body = strings.NewReader(strings.Repeat("u", 2000))
					}
					req, _ := http.NewRequestWithContext(ctx, method, front.URL+p, body)
					req.Host = "example.com"
					resp, err := client.Do(req)
					if err != nil {
						return
					}
					if rand.IntN(3) == 0 {
						_, _ = io.CopyN(io.Discard, resp.Body, 1000)
					} else {
						_, _ = io.Copy(io.Discard, resp.Body)
					}
					resp.Body.Close()
					mu.Lock()
					codes[resp.StatusCode]++
					mu.Unlock()
				})
				if i%10 == 0 {
					time.Sleep(time.Millisecond)
				}
			}
			wg.Wait()
			close(stopReload)
			reloads.Wait()
			front.Close() // waits for every handler
			h.Wait()
			deadline := time.Now().Add(20 * time.Second)
			var n, left map[string]int
			for {
				h.clients.mu.Lock()
				n, left = s35CopyMap(h.clients.n), s35CopyMap(h.clients.left)
				h.clients.mu.Unlock()
				if (len(n) == 0 && len(left) == 0) || time.Now().After(deadline) {
					break
				}
				time.Sleep(50 * time.Millisecond)
			}
			t.Logf("codes %v", codes)
			if len(n) != 0 || len(left) != 0 {
				t.Errorf("after every request ended: clients.n=%v clients.left=%v, want both empty", n, left)
			}
		})
	}
}

func s35CopyMap(m map[string]int) map[string]int {
	c := make(map[string]int, len(m))
	for k, v := range m {
		c[k] = v
	}
	return c
}
