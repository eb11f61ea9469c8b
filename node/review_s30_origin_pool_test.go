package node

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// s30States returns the origin states of site name on n's status page.
func s30Up(n *s7Node, site string) (up, total int) {
	for _, s := range n.siteStatus() {
		if s.Name != site {
			continue
		}
		for _, o := range s.Origins {
			total++
			if o.Up {
				up++
			}
		}
	}
	return up, total
}

// A review found (now mended): a site with preserve_host: true (an origin that serves several
// names by Host, as the docs' own "blog" example does) and an active
// check: the probe goes out with Host set to the origin URL's host
// (127.0.0.1:port), never one of the site's hosts, and there is no key to
// choose it. A name-based origin answers the probe with its default
// vhost's 404, so every member is ejected ("origin ejected" warnings,
// edge_origin_up 0, the status page all red), re-ejected at every
// interval, and the pool runs in its "every origin is out" order (the one
// back soonest takes the traffic: no balancing). Steps: two origins that
// answer only Host blog.test; site blog with preserve_host and health
// {path: /healthz, interval: 100ms}; GETs to blog.test answer 200.
// Expected: both members up. Got: both down.
func TestS30OriginHealthCheckOfAPreserveHostSiteSendsTheOriginsHost(t *testing.T) {
	vhost := func() *httptest.Server {
		s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Host != "blog.test" {
				http.Error(w, "no such site", http.StatusNotFound)
				return
			}
			w.Header().Set("Cache-Control", "no-store")
			_, _ = io.WriteString(w, "blog "+r.URL.Path)
		}))
		t.Cleanup(s.Close)
		return s
	}
	o1, o2 := vhost(), vhost()
	n := startS7Node(t, "sites:\n"+s7Site("blog", []string{"blog.test"}, []string{o1.URL, o2.URL},
		"    preserve_host: true\n    health: {path: /healthz, interval: 100ms, timeout: 1s}\n"))
	for i := range 4 {
		if code, body := n.get("blog.test", fmt.Sprintf("/post/%d", i)); code != 200 || !strings.HasPrefix(body, "blog ") {
			t.Fatalf("the site itself does not answer: %d %q", code, body)
		}
	}
	time.Sleep(700 * time.Millisecond)
	if up, total := s30Up(n, "blog"); up != total {
		t.Fatalf("%d of %d origins up although every one answers the site's requests: the health probe is sent with the origin's host, not the site's", up, total)
	}
}

// TestS30OriginClientsBrokenUploadsDoNotEjectAHealthyOrigin: with
// limits.request_buffering false, uploads the client cuts short (declares
// 100000 bytes, sends 10, hangs up) are not counted against the origin:
// net/http cancels the request's context on the client's read error, so
// Pool.fetchFrom does not call it a passive failure, and six of them in a
// row leave both healthy members in rotation.
func TestS30OriginClientsBrokenUploadsDoNotEjectAHealthyOrigin(t *testing.T) {
	var reached atomic.Int64
	ok := func() *httptest.Server {
		s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			reached.Add(1)
			_, _ = io.Copy(io.Discard, r.Body)
			_, _ = io.WriteString(w, "ok")
		}))
		t.Cleanup(s.Close)
		return s
	}
	o1, o2 := ok(), ok()
	n := startS7Node(t, "limits: {request_buffering: false}\nsites:\n"+s7Site("shop", []string{"shop.test"}, []string{o1.URL, o2.URL}, ""))
	for i := range 6 {
		c, err := net.Dial("tcp", n.pub)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(c, "POST /upload/%d HTTP/1.1\r\nHost: shop.test\r\nContent-Length: 100000\r\n\r\n0123456789", i)
		time.Sleep(150 * time.Millisecond)
		c.Close()
		time.Sleep(150 * time.Millisecond)
	}
	if up, total := s30Up(n, "shop"); up != total {
		t.Fatalf("%d of %d healthy origins up after 6 uploads cut short by their client: a client's broken body is counted as the origin's failure", up, total)
	}
	if reached.Load() < 4 {
		t.Fatalf("only %d of the 6 uploads reached an origin: the test did not exercise the streamed path", reached.Load())
	}
}

// A review found (now mended): an origin that accepts the connection and then reads nothing
// (a hung process, a full accept backlog behind a live socket) holds an
// upload for ever: origin.response_timeout only starts once the request
// is written, and nothing bounds the write of the body (no send timeout,
// no deadline on a pass). Steps: origin.response_timeout 1s; the origin
// is a TCP listener that accepts and never reads; a client POSTs 24 MiB
// (buffered to the spool first, then sent). Expected: a 502/504 within a
// few seconds of the timeout. Got: no answer after 10 s; the request
// holds its max_inflight slot, its spool share and the client for as long
// as the client waits.
func TestS30OriginHungOriginThatReadsNoUploadHoldsItForever(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var held []net.Conn
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			held = append(held, c) // never read, never answered
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range held {
			c.Close()
		}
		mu.Unlock()
	})
	n := startS7Node(t, "origin: {response_timeout: 1s, connect_timeout: 1s}\nlimits: {spool_dir: '"+t.TempDir()+"'}\nsites:\n"+
		s7Site("shop", []string{"shop.test"}, []string{"http://" + ln.Addr().String()}, ""))
	c, err := net.Dial("tcp", n.pub)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const size = 24 << 20
	go func() {
		fmt.Fprintf(c, "POST /upload HTTP/1.1\r\nHost: shop.test\r\nContent-Length: %d\r\nConnection: close\r\n\r\n", size)
		chunk := make([]byte, 1<<20)
		for range size / len(chunk) {
			if _, err := c.Write(chunk); err != nil {
				return
			}
		}
	}()
	start := time.Now()
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	buf := make([]byte, 64)
	k, err := c.Read(buf)
	if err != nil {
		mu.Lock()
		accepted := len(held)
		mu.Unlock()
		t.Fatalf("no answer %v after the upload to an origin that reads nothing (origin.response_timeout 1s; the origin accepted %d connection(s)): %v", time.Since(start).Round(time.Second), accepted, err)
	}
	t.Logf("answered after %v: %q", time.Since(start), buf[:k])
}
