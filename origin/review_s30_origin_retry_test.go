package origin

import (
	"bufio"
	"context"
	"encoding/pem"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// s30ResetOrigin reads each request whole (head and body) and then resets
// the connection without answering: the origin may have acted on it.
func s30ResetOrigin(t *testing.T, got *atomic.Int64) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				req, err := http.ReadRequest(bufio.NewReader(c))
				if err != nil {
					return
				}
				_, _ = io.Copy(io.Discard, req.Body)
				got.Add(1)
				if tc, ok := c.(*net.TCPConn); ok {
					_ = tc.SetLinger(0) // RST
				}
			}()
		}
	}()
	return "http://" + ln.Addr().String()
}

// TestS30OriginUnsafeRequestsAreNeverResentAfterAReset: a POST, PATCH or
// DELETE (with a body or without, with an Idempotency-Key or without)
// that the origin read and then reset is sent once in all, never again to
// the same origin or to the other member of the pool; a GET is retried.
func TestS30OriginUnsafeRequestsAreNeverResentAfterAReset(t *testing.T) {
	var n1, n2 atomic.Int64
	p := poolOf(t, "least", s30ResetOrigin(t, &n1), s30ResetOrigin(t, &n2))
	cases := []struct {
		method, body, key string
	}{
		{"POST", `{"order":1}`, ""},
		{"POST", "", ""},
		{"POST", `{"order":2}`, "k-2"},
		{"PATCH", `{"qty":3}`, ""},
		{"DELETE", "", ""},
	}
	for _, c := range cases {
		before := n1.Load() + n2.Load()
		var body io.Reader = http.NoBody
		if c.body != "" {
			body = strings.NewReader(c.body)
		}
		req, _ := http.NewRequest(c.method, "/cart", body)
		if c.body == "" {
			req.Body = http.NoBody
		}
		if c.key != "" {
			req.Header.Set("Idempotency-Key", c.key)
		}
		req.GetBody = nil // a server request's body cannot be rewound
		resp, err := p.Fetch(context.Background(), req)
		if err == nil {
			resp.Body.Close()
		}
		time.Sleep(50 * time.Millisecond)
		if d := n1.Load() + n2.Load() - before; d != 1 {
			t.Errorf("%s body=%q key=%q: origins received it %d times", c.method, c.body, c.key, d)
		}
	}
	before := n1.Load() + n2.Load()
	req, _ := http.NewRequest("GET", "/page", nil)
	if resp, err := p.Fetch(context.Background(), req); err == nil {
		resp.Body.Close()
	}
	time.Sleep(50 * time.Millisecond)
	if d := n1.Load() + n2.Load() - before; d < 2 {
		t.Errorf("a GET reset by one origin was not retried (%d sends)", d)
	}
}

// TestS30OriginUnsafeRequestIsNotRetriedOn503: a POST answered 503 by one
// member is answered as is, not sent to the other member.
func TestS30OriginUnsafeRequestIsNotRetriedOn503(t *testing.T) {
	var s1, s2 atomic.Int32
	var n1, n2 atomic.Int64
	s1.Store(503)
	s2.Store(503)
	a, b := counting(&s1, &n1), counting(&s2, &n2)
	defer a.Close()
	defer b.Close()
	p := poolOf(t, "least", a.URL, b.URL)
	for range 4 {
		req, _ := http.NewRequest("POST", "/pay", strings.NewReader("x=1"))
		resp, err := p.Fetch(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	if n := n1.Load() + n2.Load(); n != 4 {
		t.Fatalf("4 POSTs answered 503 reached the origins %d times", n)
	}
}

// TestS30OriginHTTP2OriginThatNeverAnswersTimesOut: over HTTP/2 (an https
// origin offering h2), origin.response_timeout still bounds the wait for
// the header, and the pool fails over a GET to the other member.
func TestS30OriginHTTP2OriginThatNeverAnswersTimesOut(t *testing.T) {
	release := make(chan struct{})
	hung := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	hung.EnableHTTP2 = true
	hung.StartTLS()
	defer hung.Close()
	defer close(release)
	var proto atomic.Value
	good := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		proto.Store(r.Proto)
		_, _ = io.WriteString(w, "ok")
	}))
	good.EnableHTTP2 = true
	good.StartTLS()
	defer good.Close()
	dir := t.TempDir()
	pemOf := func(s *httptest.Server) []byte {
		return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: s.Certificate().Raw})
	}
	caFile := filepath.Join(dir, "ca.pem")
	_ = os.WriteFile(caFile, append(pemOf(hung), pemOf(good)...), 0o600)
	oc := func(u string) ClientConfig {
		return ClientConfig{URL: u, CAFile: caFile, ConnectTimeout: time.Second, ResponseTimeout: 500 * time.Millisecond, MaxIdleConns: 4, IdleConnTimeout: time.Minute}
	}
	// hash balance: find a path whose first choice is the hung origin.
	p, err := NewPool(PoolConfig{Site: "s", Origins: []ClientConfig{oc(hung.URL), oc(good.URL)}, Balance: "hash"})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Stop()
	var path string
	for i := range 64 {
		path = "/p/" + string(rune('a'+i%26)) + string(rune('a'+i/26))
		req, _ := http.NewRequest("GET", path, nil)
		req.Host = "x.test"
		if p.order(req)[0].url == hung.URL {
			break
		}
	}
	req, _ := http.NewRequest("GET", path, nil)
	req.Host = "x.test"
	start := time.Now()
	var a Attempt
	resp, err := p.FetchReporting(context.Background(), req, &a)
	took := time.Since(start)
	if err != nil {
		t.Fatalf("GET failed after %v: %v", took, err)
	}
	resp.Body.Close()
	if took > 2*time.Second || a.Retries != 1 || a.Origin != good.URL {
		t.Fatalf("took %v, retries %d, answered by %s", took, a.Retries, a.Origin)
	}
	if p, _ := proto.Load().(string); p != "HTTP/2.0" {
		t.Fatalf("origin saw %q, want HTTP/2.0", p)
	}
}
