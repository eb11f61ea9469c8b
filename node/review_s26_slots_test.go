package node

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// HOLDS (with -race): with limits.max_inflight_per_client off (463e445
// counts serve's requests per client whatever the bound), a real node
// under 12 concurrent clients (hits, misses, passes, large passes and
// fills the client drops mid-body, HEAD, conditionals, ranges, uploads
// refused as too large, a request refused before the count) gives every
// slot back: a reload to max_inflight_per_client 1 afterwards lets the
// client's next request through (a leaked slot would answer 429).
func TestS26PerClientSlotsAllComeBackAfterMixedLoad(t *testing.T) {
	big := strings.Repeat("x", 2<<20)
	o := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case strings.HasPrefix(r.URL.Path, "/hit"):
			w.Header().Set("Cache-Control", "max-age=600")
			w.Header().Set("ETag", `"v1"`)
			_, _ = io.WriteString(w, "page "+r.URL.Path)
		case strings.HasPrefix(r.URL.Path, "/bigpass"):
			w.Header().Set("Cache-Control", "no-store")
			_, _ = io.WriteString(w, big)
		case strings.HasPrefix(r.URL.Path, "/bigfill"):
			w.Header().Set("Cache-Control", "max-age=600")
			w.Header().Set("Content-Length", fmt.Sprint(len(big)))
			for i := 0; i < len(big); i += 64 << 10 {
				_, _ = io.WriteString(w, big[i:i+64<<10])
				w.(http.Flusher).Flush()
				time.Sleep(time.Millisecond)
			}
		default:
			w.Header().Set("Cache-Control", "no-store")
			_, _ = io.WriteString(w, "pass")
		}
	}))
	t.Cleanup(o.Close)
	site := "sites:\n" + s7Site("shop", []string{"shop.test"}, []string{o.URL}, "")
	n := startS7Node(t, "limits: {max_body_bytes: 1KiB}\n"+site)
	n.get("shop.test", "/hit-warm")
	abort := func(req string, read int) {
		c, err := net.Dial("tcp", n.pub)
		if err != nil {
			return
		}
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		_, _ = io.WriteString(c, req)
		buf := make([]byte, read)
		_, _ = io.ReadFull(c, buf)
		c.Close() // mid-body
	}
	stop := untilStopped(12, func(w, i int) {
		h := "Host: shop.test\r\nConnection: close\r\n"
		switch (w + i) % 10 {
		case 0:
			_, _ = rawAskNoFatal(n.pub, "GET /hit-warm HTTP/1.1\r\n"+h+"\r\n")
		case 1:
			_, _ = rawAskNoFatal(n.pub, fmt.Sprintf("GET /hit-%d-%d HTTP/1.1\r\n%s\r\n", w, i%7, h))
		case 2:
			_, _ = rawAskNoFatal(n.pub, "HEAD /pass HTTP/1.1\r\n"+h+"\r\n")
		case 3:
			abort("GET /bigpass HTTP/1.1\r\n"+h+"\r\n", 4096)
		case 4:
			abort(fmt.Sprintf("GET /bigfill-%d HTTP/1.1\r\n%s\r\n", i%5, h), 4096)
		case 5:
			_, _ = rawAskNoFatal(n.pub, "GET /hit-warm HTTP/1.1\r\n"+h+"If-None-Match: \"v1\"\r\n\r\n")
		case 6:
			_, _ = rawAskNoFatal(n.pub, "GET /hit-warm HTTP/1.1\r\n"+h+"Range: bytes=1-3\r\n\r\n")
		case 7:
			_, _ = rawAskNoFatal(n.pub, "POST /pass HTTP/1.1\r\n"+h+"Content-Length: 5000\r\n\r\n")
		case 8:
			_, _ = rawAskNoFatal(n.pub, "TRACE /pass HTTP/1.1\r\n"+h+"\r\n")
		case 9:
			abort("GET /pass HTTP/1.1\r\n"+h+"\r\n", 0)
		}
	})
	time.Sleep(2 * time.Second)
	stop()
	time.Sleep(300 * time.Millisecond) // handlers of dropped connections end
	if code, body := n.reload("limits: {max_body_bytes: 1KiB, max_inflight_per_client: 1}\n" + site); code != 200 {
		t.Fatalf("reload: %d %s", code, body)
	}
	for _, path := range []string{"/pass", "/hit-warm", "/bigfill-0"} {
		var code int
		for try := 0; try < 20; try++ { // a handler still ending may hold its slot a moment
			if code, _ = n.get("shop.test", path); code != http.StatusTooManyRequests {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		if code == http.StatusTooManyRequests {
			t.Errorf("%s after the load, max_inflight_per_client 1, nothing in flight: 429 (a slot leaked)", path)
		}
	}
}
