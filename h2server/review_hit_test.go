package h2server

import (
	"bytes"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"

	"github.com/edgecache/edge/hitpath"
)

// rvAnswerer answers every request from a fixed response, as the node's
// answerer answers a fresh hit: an HTTP/1.1 head, and a large body apart.
type rvAnswerer struct {
	extra string // more "Name: value\r\n" lines
	body  []byte
}

func (a *rvAnswerer) AppendHit(dst []byte, r *hitpath.Request, date []byte, _ net.Addr, ans *hitpath.Answer) bool {
	dst = append(dst, "HTTP/1.1 200 OK\r\nContent-Length: "+strconv.Itoa(len(a.body))+"\r\nContent-Type: application/octet-stream\r\n"+a.extra...)
	dst = append(dst, date...)
	dst = append(dst, "\r\n"...)
	ans.Head = dst
	if !r.Head {
		if len(a.body) <= 4096 {
			ans.Head = append(ans.Head, a.body...)
		} else {
			ans.Body = a.body
		}
	}
	return true
}

// A hit larger than the client's window is written by a goroutine that
// waits for WINDOW_UPDATEs. limits.write_timeout is documented as "longest
// one 32 KiB write may block": a client that keeps reading must get the
// whole body however long the body takes, as on the handler path (the proxy
// renews the deadline per 32 KiB) and on the HTTP/1.1 hit path.
func TestReviewHitDeadlineIsPerResponseNotPerWrite(t *testing.T) {
	body := bytes.Repeat([]byte("0123456789abcdef"), 512<<10/16) // 512 KiB
	for _, path := range []string{"hit", "handler"} {
		srv := &Server{WriteTimeout: time.Second,
			Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				rc := http.NewResponseController(w)
				w.Header().Set("Content-Length", strconv.Itoa(len(body)))
				for p := body; len(p) > 0; p = p[32<<10:] {
					_ = rc.SetWriteDeadline(time.Now().Add(time.Second)) // as proxy.extendWrite
					if _, err := w.Write(p[:32<<10]); err != nil {
						return
					}
				}
			})}
		if path == "hit" {
			srv.Hits, srv.Fields = &rvAnswerer{body: body}, hitpath.NewFields(hitpath.Config{})
		}
		addr := rvServer(t, srv)
		c := rvDial(t, addr) // default windows: 65535
		c.headers(1, true, rvGet("/big")...)
		// The client reads 32 KiB every 100 ms (320 KB/s): 1.6 s in all,
		// never more than 100 ms without granting window.
		stop := make(chan struct{})
		go func() {
			tk := time.NewTicker(100 * time.Millisecond)
			defer tk.Stop()
			for {
				select {
				case <-stop:
					return
				case <-tk.C:
					c.do(func(fr *http2.Framer) error {
						_ = fr.WriteWindowUpdate(0, 32<<10)
						return fr.WriteWindowUpdate(1, 32<<10)
					})
				}
			}
		}()
		start := time.Now()
		resps, ok := c.collect(5*time.Second, nil, ended(1))
		close(stop)
		r := resps[1]
		if !ok || r == nil {
			t.Fatalf("%s: no end of stream", path)
		}
		t.Logf("%s: status %s, %d of %d body bytes, END_STREAM=%v RST=%v %v after %v", path, r.status, len(r.body), len(body), r.ended, r.gotRST, r.rst, time.Since(start).Round(10*time.Millisecond))
		if !r.ended || len(r.body) != len(body) {
			t.Errorf("%s: a steadily reading client lost the response after WriteTimeout (1 s) in all", path)
		}
	}
}

// A hit's response fields are read back from the HTTP/1.1 head the answerer
// writes. A stored response field whose name is longer than 64 bytes is
// dropped from the HTTP/2 answer (hit.go), though the handler path and the
// HTTP/1.1 hit path send it.
func TestReviewHitDropsLongFieldNames(t *testing.T) {
	long := "X-" + strings.Repeat("Long-Name", 8) // 74 bytes
	srv := &Server{Handler: http.NotFoundHandler(),
		Hits:   &rvAnswerer{extra: long + ": kept\r\nX-Short: kept\r\n", body: []byte("hi")},
		Fields: hitpath.NewFields(hitpath.Config{})}
	addr := rvServer(t, srv)
	c := rvDial(t, addr)
	c.headers(1, true, rvGet("/")...)
	resps, _ := c.collect(2*time.Second, nil, ended(1))
	var names []string
	for _, hf := range resps[1].header {
		names = append(names, hf.Name)
	}
	t.Logf("fields: %v", names)
	if !strings.Contains(strings.Join(names, ","), strings.ToLower(long)) {
		t.Errorf("%s was dropped from the HTTP/2 hit", long)
	}
}
